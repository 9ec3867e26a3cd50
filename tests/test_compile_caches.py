"""No compiled artifact passes from one case to another but a C++ build, which is named by its source
and compile command (harness.plugin.compilecaches): planted cases that could communicate only through
inductor's on-disk cache, and that write through or die holding a shared build, run with the session's
own pytest command (real xdist worker, real fork, real inductor)."""

import concurrent.futures
import json
import os
import subprocess
import sys

from harness.core import pytestrun, records, venvs
from harness.plugin.compilecaches import CaseCaches
from tests.conftest import CHECKOUT_VENVS, ROOT, project_with_families, run_nox
from tests.test_isolation import SESSION, by_variant, case_records, run_session_command

# The first case compiles `triple`, then rewrites the wrapper inductor left on disk so that whoever
# loads it gets 1000 added: a later compile of the same program finds the file by its hash and loads
# it as it is. The second compiles the same program and must compute it.
PLANTED = '''import os
import pathlib

import torch

TAMPER = """
_compiled_call = call


def call(args):
    outputs = _compiled_call(args)
    outputs[0].add_(1000)  # planted by an earlier case
    return outputs
"""


def triple(x):
    return x * 3


def compiled(program):
    """What `program` computes on ones(4), compiled by inductor."""
    return torch.compile(program, backend="inductor")(torch.ones(4)).tolist()


def test_leaves_a_tampered_kernel(case):
    assert compiled(triple) == [3.0] * 4
    cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    wrappers = [path for path in cache.rglob("*.py") if "def call(" in path.read_text()]
    assert wrappers, f"no compiled wrapper under {cache}"
    for path in wrappers:
        path.write_text(path.read_text() + TAMPER)


def test_computes_triple(case):
    assert compiled(triple) == [3.0] * 4


def double(x):
    return x * 2


def test_builds_double(case):
    assert compiled(double) == [2.0] * 4


def loaded_builds():
    """The C++ builds under the case's own caches that this process loaded."""
    cache = os.path.realpath(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    loaded = {line.split()[-1] for line in open("/proc/self/maps") if line.rstrip().endswith(".so")}
    return cache, sorted(os.path.relpath(path, cache) for path in loaded if path.startswith(cache + os.sep))


def test_writes_through_a_shared_build(case):
    # Served the C++ build of `double` that the case before shared, it overwrites the file in place:
    # every case that links it would load the garbage.
    assert compiled(double) == [2.0] * 4
    cache, loaded = loaded_builds()
    shared = [os.path.join(cache, path) for path in loaded if os.stat(os.path.join(cache, path)).st_nlink > 1]
    assert shared, f"no shared build under {cache} was loaded"
    for path in shared:
        with open(path, "r+b") as built:
            built.write(bytes(64))


def test_computes_double_after_its_build_was_written_through(case):
    assert compiled(double) == [2.0] * 4


def quadruple(x):
    return x * 4


def test_dies_after_building(case):
    assert compiled(quadruple) == [4.0] * 4
    cache, loaded = loaded_builds()
    pathlib.Path(cache, "loaded.txt").write_text(" ".join(loaded))
    os.kill(os.getpid(), 9)  # as a case killed at its time limit: what it built may be half-written


def test_computes_quadruple(case):
    assert compiled(quadruple) == [4.0] * 4


def test_compiles_with_headers_of_its_own(case):
    # inductor's precompiled headers go under the temporary directory, not TORCHINDUCTOR_CACHE_DIR
    import tempfile
    from torch._inductor import codecache

    own = os.path.realpath(os.path.dirname(os.environ["TORCHINDUCTOR_CACHE_DIR"])) + os.sep
    assert os.path.realpath(tempfile.gettempdir()).startswith(own), tempfile.gettempdir()
    headers = getattr(codecache, "_HEADER_DIR", None)  # torch 2.8 on
    assert headers is None or os.path.realpath(headers).startswith(own), headers
    assert torch.compile(lambda x: (x.sin() * 2).cos(), backend="inductor")(torch.zeros(4)).tolist() == [1.0] * 4
'''

# What a fresh process computes when it compiles `triple` with a given cache directory.
SERVED = """import torch


def triple(x):
    return x * 3


print(torch.compile(triple, backend="inductor")(torch.ones(4)).tolist())
"""


def served_from(cache_dir) -> list:
    env = pytestrun.clean_env(TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", SERVED], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_cases_cannot_communicate_through_a_compile_cache(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv(pytestrun.SESSION_ENV, SESSION.name)
    caches = tmp_path / "compile-caches"
    monkeypatch.setenv(pytestrun.COMPILE_CACHES_ENV, str(caches))
    planted = pytester.makepyfile(test_cache_plant=PLANTED)
    result, path, _ = run_session_command(pytester, planted, "--timeout=300")
    cases = by_variant(case_records(path))
    assert {name: record["outcome"] for name, record in cases.items()} == {
        "leaves_a_tampered_kernel": "pass", "computes_triple": "pass", "builds_double": "pass",
        "writes_through_a_shared_build": "pass", "computes_double_after_its_build_was_written_through": "pass",
        "dies_after_building": "crash",
        "computes_quadruple": "pass", "compiles_with_headers_of_its_own": "pass"
    }, result.stdout.str()[-3000:]
    [written_through] = cases["writes_through_a_shared_build"]["leaked"]
    assert "shared C++ build(s) written through" in written_through, written_through
    assert not any(record.get("leaked") for name, record in cases.items() if name != "writes_through_a_shared_build")
    # The artifact is real: a process served from the first case's cache gets the planted program.
    first = CaseCaches(caches, "gw0").case_directory(cases["leaves_a_tampered_kernel"]["case"])
    assert served_from(first / "inductor") == [1003.0] * 4
    second = CaseCaches(caches, "gw0").case_directory(cases["computes_triple"]["case"])
    assert served_from(second / "inductor") == [3.0] * 4
    # Only the C++ build passed from the first to the second: the same file, built once.
    built = {path.relative_to(first): path for path in first.rglob("*.so") if path.stat().st_nlink > 1}  # not copies
    assert built and all((second / name).samefile(path) for name, path in built.items()), sorted(built)
    # What a case cut short built is not shared: the next case to compile it builds it again.
    died = CaseCaches(caches, "gw0").case_directory(cases["dies_after_building"]["case"])
    after = CaseCaches(caches, "gw0").case_directory(cases["computes_quadruple"]["case"])
    quadruple = (died / "inductor" / "loaded.txt").read_text().split()
    assert quadruple, "the case that died loaded no build of its own"
    served = [name for name in quadruple if (after / "inductor" / name).samefile(died / "inductor" / name)]
    assert not served, f"a build of a case that died was shared: {served}"
    # The precompiled header the case compiled with is in its own directory: a link to the warm-up's
    # (torch's headers only, built once), never one that another case built.
    worker = CaseCaches(caches, "gw0")
    headers = worker.case_directory(cases["compiles_with_headers_of_its_own"]["case"])
    built = list((headers / "tmp").rglob("*.gch"))
    assert built and all(path.samefile(worker.warm_up / path.relative_to(headers)) for path in built), built
    # The session ran with torch's own cache defaults, and its environment record says which were on.
    environment = records.read(path)[0]["compile_caches"]
    assert environment["flags"]["fx_graph_cache"] is True and "TORCHINDUCTOR_FX_GRAPH_CACHE" not in environment["env"]
    assert environment["per_case"].endswith("/compile-caches")  # the record writes the temporary root as <tmp>


def test_the_cache_directories_a_case_resolves_are_its_own(tmp_path, monkeypatch):
    """The link every compile resolves through is repointed in one step, and back after the case."""
    monkeypatch.setenv(pytestrun.COMPILE_CACHES_ENV, str(tmp_path))
    caches = CaseCaches(tmp_path, "gw0")
    caches.point_at(caches.warm_up)
    (caches.link / "inductor" / "prefix.h").write_text("warm-up")  # what torch 2.1 writes once per process
    caches.warmed_up()
    caches.enter_case("family/variant[a]")
    assert (caches.link / "inductor" / "prefix.h").read_text() == "warm-up", "a case starts with the warm-up's files"
    (caches.link / "inductor" / "prefix.h").write_text("changed by the case")  # a copy: the warm-up's stays
    assert os.path.realpath(caches.link) == str(caches.case_directory("family/variant[a]"))
    (caches.link / "inductor" / "kernel.so").write_text("x")
    assert caches.leave_case() == []
    assert os.path.realpath(caches.link) == str(caches.warm_up)
    assert (caches.case_directory("family/variant[a]") / "inductor" / "kernel.so").exists()
    assert caches.case_directory("family/variant[a]") != caches.case_directory("family/variant[b]")
    caches.enter_case("family/variant[b]")
    (caches.warm_up / "inductor" / "late.so").write_text("x")  # a case that wrote outside its caches
    assert "warm-up cache written" in caches.leave_case()[0]


def test_a_case_directory_kept_from_another_workers_run_keeps_no_cache_entry_naming_that_workers_link(tmp_path):
    """Torch 2.1-2.3 keep in an FX graph cache entry the absolute path of its module, through the worker's
    link: a later run of the case on another worker resolved it into the case that link served then
    (row 2.2's property_recompile_op[cpu-inductor]: FileNotFoundError on its second run)."""
    first, second = CaseCaches(tmp_path, "gw0"), CaseCaches(tmp_path, "gw1")
    for caches in (first, second):
        caches.point_at(caches.warm_up)
        caches.warmed_up()
    case = "family/variant[a]"
    first.enter_case(case)
    module = first.link / "inductor" / "ab" / "cabc.py"
    module.parent.mkdir()
    module.write_text("def call(args): ...")
    entry = first.link / "inductor" / "fxgraph" / "xy" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_text(str(module))  # the path as torch 2.2 keeps it: through gw0's link
    first.leave_case()
    first.enter_case(case)  # the same worker's next run: served what it kept
    assert entry.exists()
    first.leave_case()
    second.enter_case(case)
    own = second.case_directory(case)
    assert not (own / "inductor" / "fxgraph").exists(), "an entry naming gw0's link is served through gw1's"
    assert (own / "inductor" / "ab" / "cabc.py").exists() and (own / "case.txt").exists()  # the rest kept
    second.leave_case()
    second.enter_case(case)  # written through gw1 from now on: kept
    entry = second.link / "inductor" / "fxgraph" / "xy" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_text("x")
    second.leave_case()
    second.enter_case(case)
    assert entry.exists()


TWO_AT_ONCE = '''
import torch


def test_triple(case, backend):
    case.check(lambda x: x * 3, torch.randn(4, requires_grad=True))
'''


@CHECKOUT_VENVS
def test_two_runs_of_one_venv_at_once_each_keep_their_cases_caches_where_their_caller_said(tmp_path):
    """Two `nox -s SESSION` at once in one venv (two terminals; the harness's own suite on two workers):
    each names its own $HARNESS_COMPILE_CACHES, and each case compiles there, not into the venv's
    caches, whose worker link the two runs would otherwise point at each other's cases."""
    project = project_with_families(tmp_path / "project", {"caches_apart": TWO_AT_ONCE})
    venv_caches = CaseCaches(pytestrun.compile_caches(venvs.venv_dir(SESSION.name, ROOT / ".nox")), "main")

    def run(name):
        results, caches = tmp_path / name / "results", tmp_path / name / "compile-caches"
        done = run_nox(project, "-s", SESSION.name, "--", "-k", "inductor", results=results,
                       env={pytestrun.COMPILE_CACHES_ENV: str(caches)})
        return done, results, caches

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, ["first", "second"]))
    for done, results, caches in runs:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        ran = [r for r in case_records(results / f"{SESSION.name}.jsonl") if r["outcome"] != "skip"]
        assert ran and all(r["outcome"] == "pass" and r["params"]["backend"] == "inductor" for r in ran), ran
        for record in ran:
            own = CaseCaches(caches, "main").case_directory(record["case"])
            assert (own / "case.txt").read_text().strip() == record["case"]
            assert any((own / "inductor").rglob("*.py")), f"nothing compiled into {own}"
            assert not venv_caches.case_directory(record["case"]).exists(), "compiled into the venv's caches"
