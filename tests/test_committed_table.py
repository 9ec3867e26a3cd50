"""The report's default comparison: the table as last committed (harness.report.committed), read
from a real git repository's objects, so a page says what changed since the last run."""

import subprocess

from tests.test_report import CK, OLD, run_cli, section, write_session


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_a_report_says_what_changed_since_the_table_last_committed(tmp_path):
    repo = tmp_path / "repo"
    table = repo / "results"
    git(tmp_path, "init", "-q", str(repo))
    write_session(table, "cpu_torch25", "2.5.1", {CK: "pass", OLD: "pass"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first table")
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (table / "notes.md").write_text("a later commit under results/, the table unchanged\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "notes")
    write_session(table, "cpu_torch25", "2.5.1", {CK: "fail", OLD: "pass"})  # measured again: CK regressed
    done = run_cli(table, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr  # for information: it never sets the exit status
    heading = f"## Since the table committed at {first[:12]}"  # the commit that committed it, not a later one
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert f"| cpu_torch25 | `{CK}` | **regressed** | pass | fail |" in section(text, next(
        line for line in text.splitlines() if line.startswith(heading)))
    html = (tmp_path / "out" / "report.html").read_text()
    assert f"Changed since the table committed at {first[:12]}" in html
    # committed, the new table compares with the one before it, not with itself
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second table")
    assert run_cli(table, "--out", tmp_path / "again").returncode == 0
    assert heading in (tmp_path / "again" / "REPORT.md").read_text()
    # told not to, or outside git: no comparison, and the page says why
    assert "## Since the table" not in (run_cli(table, "--no-since-committed", "--out", tmp_path / "off")
                                        and (tmp_path / "off" / "REPORT.md").read_text())
    alone = tmp_path / "alone"
    write_session(alone, "cpu_torch25", "2.5.1", {CK: "pass"})
    assert run_cli(alone).returncode == 0
    assert "not compared:" in (alone / "report.html").read_text()
