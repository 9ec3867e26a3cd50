"""Stand-in for EnricoMi/publish-unit-test-result-action under act: it reads the JUnit files of the
`files` input as the action does and writes their counts to the step summary and the `json` output.
It does not create a check run (there is no GitHub API to write to here)."""

from __future__ import annotations

import glob
import json
import os
import sys
import xml.etree.ElementTree as ElementTree


def main() -> int:
    files = sorted({f for pattern in os.environ["INPUT_FILES"].split() for f in glob.glob(pattern, recursive=True)})
    counts = {"files": len(files), "tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for path in files:
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            counts["tests"] += 1
            for kind, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                counts[key] += case.find(kind) is not None
    line = ", ".join(f"{value} {key}" for key, value in counts.items())
    print(f"{os.environ.get('INPUT_CHECK_NAME', 'Test Results')}: {line}")
    with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as handle:
        handle.write(f"## {os.environ.get('INPUT_CHECK_NAME', 'Test Results')}\n\n{line}\n")
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as handle:
        handle.write(f"json={json.dumps(counts)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
