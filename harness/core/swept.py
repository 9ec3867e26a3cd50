"""Where a script fails, passes and fails another way along the torch versions: what `harness sweep
--issue` measured, said in one line of the issue text it writes, and read back from that text by the
report, which holds it against the table's own cells (harness.report.findings). The line's wording
and its reading are defined here together, so that they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import re

_VERSION = r"\d+\.\d+(?:\.\d+)?(?:[a-z+.\w]*)?"
_VERSIONS = rf"{_VERSION}(?:, {_VERSION})*"
LINE = re.compile(rf"^Fails on torch (?P<failing>{_VERSIONS})(?:; passes on (?P<passing>{_VERSIONS}))?\. "
                  rf"The first version it fails on: {_VERSION}\.(?: Fails otherwise on (?P<otherwise>.*)\.)?$")
# one version that failed another way: "2.1.2 (its error line, cut)", entries joined by "; "
_OTHERWISE = re.compile(rf"(?:^|; )(?P<version>{_VERSION}) \(")


@dataclasses.dataclass(frozen=True)
class Swept:
    failing: tuple[str, ...]  # the versions where the script fails the newest failing version's way, oldest first
    passing: tuple[str, ...] = ()
    otherwise: tuple[tuple[str, str], ...] = ()  # (version, its error line) where it fails another way

    def line(self) -> str:
        said = f"Fails on torch {', '.join(self.failing)}"
        said += f"; passes on {', '.join(self.passing)}" if self.passing else ""
        said += f". The first version it fails on: {self.failing[0]}."
        if self.otherwise:
            said += f" Fails otherwise on {'; '.join(f'{version} ({error})' for version, error in self.otherwise)}."
        return said

    @property
    def versions(self) -> int:
        """How many versions the script ran on."""
        return len(self.failing) + len(self.passing) + len(self.otherwise)

    @property
    def otherwise_versions(self) -> tuple[str, ...]:
        return tuple(version for version, _ in self.otherwise)


def read(text: str) -> Swept | None:
    """The sweep an issue text states, or None where it states none (a text written by hand)."""
    for line in text.splitlines():
        found = LINE.match(line)
        if found:
            otherwise = found["otherwise"] or ""
            starts = list(_OTHERWISE.finditer(otherwise))
            entries = [(m["version"], otherwise[m.end():(starts[i + 1].start() if i + 1 < len(starts) else None)]
                        .removesuffix(")")) for i, m in enumerate(starts)]
            return Swept(tuple(found["failing"].split(", ")),
                         tuple(found["passing"].split(", ")) if found["passing"] else (), tuple(entries))
    return None
