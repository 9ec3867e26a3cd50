"""How a reproduction script classifies its own run, the one definition both script writers use
(script.py for a case's code, op_example.py for an op property's example): the failures the matrix
declares for the case (EXPECTED), the `declared(error)` function that matches an error against them,
the outcome a clean run has, and the exit code of each outcome the script can reach.

A clean run of a case that declares an upstream bug is `fixed`, not `pass`: the bug no longer
reproduces (harness.core.outcomes.clean_outcome, the runner's rule too).
"""

from __future__ import annotations

import dataclasses

from harness.core import outcomes

DECLARED_FUNCTION = '''
def declared(error):
    """The outcome EXPECTED gives `error` or an error it was raised from, else None."""
    while error is not None:
        names = {n for c in type(error).__mro__ for n in (c.__name__, f"{c.__module__}.{c.__qualname__}")}
        for outcome, _, raises, pattern in EXPECTED:
            if names & set(raises) and re.search(pattern or "", str(error)):
                return outcome
        error = error.__cause__ or error.__context__
'''


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a script of one case declares, and how it ends."""
    expected: tuple  # (outcome, reference, exception names, message pattern) per declared failure
    clean: str  # the outcome of a run that raised nothing: `fixed` where an upstream bug is declared

    @classmethod
    def of(cls, info: dict) -> "Verdict":
        expected = tuple((e["kind"], e["ref"], tuple(e["raises"]), e["match"]) for e in info["expected"])
        return cls(expected, outcomes.clean_outcome(e["kind"] for e in info["expected"]))

    def exit_codes(self, can_skip: bool) -> dict[str, int]:
        """The exit code of each outcome this script can reach: never one without a code (flaky, timeout,
        crash), which no script prints."""
        reachable = {self.clean, "fail"} | ({"skip"} if can_skip else set()) | {e[0] for e in self.expected}
        return {name: o.exit_code for name, o in outcomes.OUTCOMES.items()
                if name in reachable and o.exit_code is not None}

    def declarations(self) -> str:
        """EXPECTED and declared(error), or nothing where the case declares no failure."""
        if not self.expected:
            return ""
        listed = "".join(f"\n    {e!r}," for e in self.expected) + "\n" if len(self.expected) > 1 \
            else repr(self.expected[0])
        return (f"EXPECTED = [{listed}]  # (outcome, reference, exception names, message pattern)\n\n"
                + DECLARED_FUNCTION.strip())

    def on_error(self) -> str:
        """The expression a script's `except Exception as error:` assigns to `outcome`."""
        return "declared(error) or 'fail'" if self.expected else "'fail'"

    def ending(self, can_skip: bool, figures: str | None = None) -> list[str]:
        """A script's last two lines: its `OUTCOME: ...` line (read back by harness.tools.scriptrun), after the
        expression `figures` where given, and the exit with that outcome's code (`skip: <why>` exits as skip)."""
        outcome_line = "OUTCOME: {outcome} (torch {torch.__version__})"
        printed = f"'figures:', {figures}, f'\\n{outcome_line}'" if figures else f"f'{outcome_line}'"
        return [f"print({printed})", f"sys.exit({self.exit_codes(can_skip)!r}[outcome.split(':')[0]])"]
