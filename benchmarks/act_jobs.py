"""Every workflow job under nektos/act, on each event GitHub sends it, on this machine: whether it
passed and how long each job ran. Prints figures; asserts nothing (tests/test_act_workflows.py holds
what the runs must show).

    python benchmarks/act_jobs.py [--list] [--only NAME ...] [--work DIR]

Each run is one act invocation (tests/act_runner.py: on the host, the pinned actions mapped to their
stand-ins, a local stand-in for GitHub's API), of one job and the jobs it needs, narrowed the way a
maintainer narrows a real run, each with a HOME of its own that starts empty as a hosted runner's (what
a job downloads and caches is its own): the nightly to the newest CPU row and one family (`NIGHTLY_TAG`,
`NIGHTLY_CASES`), explore and cuda-collect to one matrix entry each (act's `--matrix`). What a run
leaves (checkouts, venvs: about 5 GB each) goes under --work and is removed after it.
The long runs are left out unless named (--only): the `tests` job, the harness's own suite (`nox -s
tests`, act tests included: ci-push-tests); the newest row whole as a night runs it, its cases and
then the findings' regression tests (nightly-schedule-full-row); and explore's entries for the
families other than recompile (nightly-schedule-explore-FAMILY, 15-30 min each here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout, for `harness`, `tests`

from harness.core import matrix  # noqa: E402
from harness.core.sources import family_files  # noqa: E402
from tests import act_runner  # noqa: E402
from tests.fake_github import FakeGitHub  # noqa: E402

NEWEST = matrix.main_session().name
SMALL_FAMILY = "cases/test_recompile.py"  # three CPU cells on the newest row
NARROW = {"NIGHTLY_TAG": "latest", "NIGHTLY_CASES": SMALL_FAMILY}
TAGS = ("all", "cpu", "cuda", "registry", "latest", "oldest", "nightly")  # nightly.yml's `tag` input
REPOSITORY = {"id": 1, "name": "project", "full_name": "owner/project", "default_branch": "main", "private": False,
              "owner": {"login": "owner", "type": "Organization"}}


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    workflow: str
    event: str
    job: str
    variables: dict = dataclasses.field(default_factory=dict)
    inputs: dict | None = None  # workflow_dispatch's
    matrix: tuple[str, ...] = ()  # act's --matrix filters
    edit: bool = False  # a pull request that changes the small family (its cells run again)
    long: bool = False  # left out unless named (--only)


PLANS = [
    Plan("ci-push-lint", "ci.yml", "push", "lint"),
    Plan("ci-push-main-job", "ci.yml", "push", "main-job"),
    Plan("ci-push-tests", "ci.yml", "push", "tests", long=True),
    Plan("ci-pr-lint", "ci.yml", "pull_request", "lint"),
    Plan("ci-pr-main-job", "ci.yml", "pull_request", "main-job"),
    Plan("ci-pr-table-signal", "ci.yml", "pull_request", "table-signal", edit=True),
    Plan("ci-pr-table-signal-nothing", "ci.yml", "pull_request", "table-signal"),
    Plan("ci-dispatch-lint", "ci.yml", "workflow_dispatch", "lint"),
    Plan("ci-dispatch-main-job", "ci.yml", "workflow_dispatch", "main-job"),
    Plan("nightly-schedule-report", "nightly.yml", "schedule", "aggregate", NARROW),
    # the newest row whole, as a night runs it (its cases, then the findings' regression tests): --only
    Plan("nightly-schedule-full-row", "nightly.yml", "schedule", "aggregate", {"NIGHTLY_TAG": "latest"}, long=True),
    Plan("nightly-schedule-junit", "nightly.yml", "schedule", "junit", NARROW),
    # explore-summary and the explore entry of one family (nightly.yml's matrix: every family)
    *(Plan(f"nightly-schedule-explore-{family}", "nightly.yml", "schedule", "explore-summary", NARROW,
           matrix=(f"family:{family}",), long=family != "recompile") for family in family_files()),
    Plan("nightly-schedule-cuda-report", "nightly.yml", "schedule", "cuda-report", NARROW),
    *(Plan(f"nightly-dispatch-{tag}", "nightly.yml", "workflow_dispatch", "sessions",
           inputs={"tag": tag, "fresh": False, "cases": SMALL_FAMILY, "torch_build": "table"}) for tag in TAGS),
    # a manual run that measures the newest row on PyTorch's CPU-only build (its session job, one family)
    Plan("nightly-dispatch-cpu-build", "nightly.yml", "workflow_dispatch", "session",
         inputs={"tag": "latest", "fresh": True, "cases": SMALL_FAMILY, "torch_build": "cpu"},
         matrix=(f"session:{NEWEST}",)),
    *(Plan(f"cuda-collect-{event}", "cuda-collect.yml", event, "cuda-collect", matrix=("session:cuda13_torch215",))
      for event in ("schedule", "pull_request", "workflow_dispatch")),
]
DEFAULT = [plan.name for plan in PLANS if not plan.long]


def payload(plan: Plan, repo: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    head = act_runner.git(repo, "rev-parse", "HEAD").strip()
    if plan.event == "pull_request":
        return act_runner.pull_request_event(repo, work)
    if plan.event == "push":
        data = {"ref": "refs/heads/main", "before": head, "after": head, "repository": REPOSITORY,
                "sender": {"login": "maintainer", "type": "User"}}
    elif plan.event == "workflow_dispatch":
        data = {"inputs": plan.inputs or {}, "ref": "refs/heads/main", "repository": REPOSITORY,
                "sender": {"login": "maintainer", "type": "User"}, "workflow": f".github/workflows/{plan.workflow}"}
    else:
        return act_runner.EVENTS / f"{plan.event}.json"
    path = work / "event.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run(plan: Plan, work: pathlib.Path, toolcache: pathlib.Path) -> act_runner.ActRun:
    repo = act_runner.make_repository(work)
    if plan.edit:  # a line of code in the family, so that its cells run again
        text = (act_runner.ROOT / SMALL_FAMILY).read_text(encoding="utf-8") + "\nA_LINE_OF_CODE = True\n"
        act_runner.branch(repo, "feature", {SMALL_FAMILY: text})
    table = (act_runner.ROOT / "results" / f"{NEWEST}.jsonl").read_text(encoding="utf-8")
    runs = [{"id": 700, "event": "schedule", "head_branch": "main",
             "artifacts": {f"results-{NEWEST}": {f"{NEWEST}.jsonl": table}}}]
    with FakeGitHub(runs, repo="owner/project") as api:
        return act_runner.run_act(repo, plan.event, payload(plan, repo, work), plan.workflow, work=work,
                                  toolcache=toolcache, job=plan.job, variables=plan.variables,
                                  env={"GITHUB_API_URL": api.url}, extra=[f"--matrix={m}" for m in plan.matrix],
                                  timeout=3600, home=work / "home")  # a hosted runner's: nothing cached yet


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[plan.name for plan in PLANS], default=DEFAULT)
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--work", type=pathlib.Path, default=None,
                        help="where the runs' files go (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.list:
        for plan in PLANS:
            print(f"{plan.name}: {plan.workflow} on {plan.event}, job {plan.job}")
        return 0
    if args.work is not None:  # a folder named for the runs is made, as a temporary one would be
        try:
            args.work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--work {args.work}: {exc.strerror}")
    base = pathlib.Path(tempfile.mkdtemp(prefix="act-jobs-", dir=args.work))
    toolcache = base / "toolcache"  # the stand-in setup-python's venvs, shared by the runs
    print(f"act {act_runner.ACT}; newest CPU row {NEWEST}; logs under {base}", flush=True)
    for plan in (plan for plan in PLANS if plan.name in args.only):
        work = base / plan.name
        work.mkdir()
        try:
            done = run(plan, work, toolcache)
        except Exception as exc:  # noqa: BLE001 - a run that could not happen is a figure too
            print(f"{plan.name}: not run: {type(exc).__name__}: {exc}", flush=True)
            continue
        seconds = done.job_seconds()
        jobs = "; ".join(f"{job} {result} {seconds.get(job, 0):.0f} s" for job, result in done.job_results().items())
        print(f"{plan.name}: act exit {done.returncode} in {done.seconds:.0f} s: {jobs or 'no job ran'}", flush=True)
        shutil.copy(next(work.glob("act-*.log")), base / f"{plan.name}.log")
        for leftover in work.iterdir():
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
