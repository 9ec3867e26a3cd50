import pytest
from packaging.version import Version

from harness.core import matrix, pytestrun
from harness.tools import lightning_releases

SESSIONS = matrix.load()
NAMES = {s.name for s in SESSIONS}


@pytest.mark.parametrize("minor", range(1, 16))
def test_every_torch_minor_has_a_cpu_and_a_cuda_session(minor):
    cpu = [s for s in SESSIONS if s.name == f"cpu_torch2{minor}"]
    cuda = [s for s in SESSIONS if s.device == "cuda" and s.name.endswith(f"_torch2{minor}")]
    assert len(cpu) == 1 and cuda
    assert Version(cpu[0].torch).release[:2] == (2, minor)


@pytest.mark.parametrize("name", ["cpu_torch25", "cuda12_torch25", "cpu_torch213", "cuda13_torch211", "cuda11_torch21"])
def test_session_names_say_device_cuda_and_torch(name):
    assert name in NAMES


@pytest.mark.parametrize("session", SESSIONS, ids=lambda s: s.name)
def test_session_pins_are_exact_and_consistent(session):
    if not session.nightly:
        assert session.requirements[0] == f"torch=={session.torch}"
    assert f"lightning=={session.lightning}" in session.requirements
    # lightning pulls pytorch-lightning unpinned: both must carry the same pin
    assert f"pytorch-lightning=={session.lightning}" in session.requirements
    assert any(r.startswith("setuptools") for r in session.requirements)  # inductor imports it
    if session.device == "cuda":
        assert session.name.startswith(f"cuda{session.cuda_major}_")
        if session.index:
            assert session.index_url.startswith("https://download.pytorch.org/whl/")
            assert matrix.cuda_major_of(session.index, None) == session.cuda_major
    else:
        assert session.cuda_major is None and session.device == "cpu"
    assert session.description


def row_sessions(torch: str) -> set[str]:
    """The sessions of a plain torch row: its CPU session and its CUDA ones (no labelled row, no axis)."""
    return {s.name for s in SESSIONS if s.torch == torch and s.label is None}


PLAIN_ROWS = sorted({s.torch for s in SESSIONS if s.torch and s.label is None}, key=Version)


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("oldest", row_sessions(PLAIN_ROWS[0])),
        ("latest", row_sessions(PLAIN_ROWS[-1])),
        ("nightly", {"cpu_torch_nightly", "cuda13_torch_nightly"}),
    ],
)
def test_tags_select_groups(tag, expected):
    assert {s.name for s in SESSIONS if tag in s.tags} == expected
    assert matrix.main_session(SESSIONS).name in row_sessions(PLAIN_ROWS[-1])  # the main job: the newest row's CPU


def test_old_torch_rows_carry_the_environment_pitfall_pins():
    assert "numpy<2" in matrix.find("cpu_torch21", SESSIONS).requirements
    assert "setuptools<81" in matrix.find("cpu_torch23", SESSIONS).requirements  # lightning 2.3 imports pkg_resources


def test_unknown_session_names_the_closest():
    with pytest.raises(matrix.MatrixError, match=r"unknown session 'cpu_torch255'.*cpu_torch25"):
        matrix.find("cpu_torch255", SESSIONS)


ROW = '[[torch]]\ntorch = "2.5.1"\nlightning = "2.4.0"\npython = "3.11"\npypi_cuda = "12.4"\n'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no \\[\\[torch\\]\\] rows"),
        ("[[torch]]\ntorch = 'x'\n", "missing 'lightning'"),
        (ROW + 'cuda = ["cu999x"]\n', "unknown CUDA flavour"),
        (ROW + 'cuda = ["cu121"]\n', "index 'cu121' is not in \\[indexes\\]"),
        (ROW + ROW, "sessions defined twice"),
        ("[[torch]\n", "cannot read matrix"),
        (ROW + 'env = { TORCHINDUCTOR_FX_GRAPH_CACHE = 1 }\n', "env must be a table of NAME = \"text\""),
        (ROW + 'env = "TORCHINDUCTOR_FX_GRAPH_CACHE=1"\n', "env must be a table"),
    ],
)
def test_malformed_table_is_a_clear_error(tmp_path, text, error):
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    with pytest.raises(matrix.MatrixError, match=error):
        matrix.load(path)


def test_a_row_declares_the_environment_its_cases_run_with(tmp_path):
    # Torch's own defaults unless the row says otherwise: the session's pytest run gets the variable.
    path = tmp_path / "matrix.toml"
    path.write_text(ROW + 'env = { TORCHINDUCTOR_FX_GRAPH_CACHE = "1" }\n')
    (declared,) = matrix.load(path)
    assert pytestrun.run_env(declared, tmp_path, pytestrun.Workers(1, ""))["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    path.write_text(ROW)
    (plain,) = matrix.load(path)
    assert not any(key.startswith("TORCHINDUCTOR_")
                   for key in pytestrun.run_env(plain, tmp_path, pytestrun.Workers(1, "")))


def test_adding_a_version_is_one_row(tmp_path):
    newest = Version(PLAIN_ROWS[-1])
    following = f"{newest.major}.{newest.minor + 1}.0"
    table = matrix.MATRIX_FILE.read_text()
    end = table.index("\n[nightly]")  # after the last row, where a new release goes
    text = (table[:end] + f'\n[[torch]]\ntorch = "{following}"\nlightning = "2.7.0"\npython = "3.12"\n'
            'pypi_cuda = "13.2"\ncuda = ["pypi"]\nextra = ["setuptools"]\n' + table[end:])
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    sessions = {s.name: s for s in matrix.load(path)}
    added, before = (matrix.session_name("cpu", v, None) for v in (following, str(newest)))
    assert {added, matrix.session_name("cuda13", following, None)} <= set(sessions)
    assert "latest" in sessions[added].tags and "latest" not in sessions[before].tags
    assert matrix.main_session(list(sessions.values())).name == added


# --- the Lightning axis ---

# The rows whose era Lightning is the newest already (the table gives them no newer one): no axis session.
ERA_ONLY = {matrix.session_name("cpu", str(row["torch"]), row.get("label")) for row in matrix.read_table()["torch"]
            if str(row.get("lightning_newest", row["lightning"])) == str(row["lightning"])}


def test_every_cpu_row_has_both_lightning_releases():
    plain = [s for s in SESSIONS if s.device == "cpu" and not s.nightly and not s.lightning_of]
    axis = {s.lightning_of: s for s in SESSIONS if s.lightning_of}
    for era in plain:
        newest = axis.get(era.name)
        if era.name in ERA_ONLY:
            assert newest is None
            continue
        assert newest is not None, era.name
        assert newest.name == f"{era.name}_{matrix.LIGHTNING_NEWEST}" and matrix.LIGHTNING in newest.tags
        assert newest.torch == era.torch and newest.python == era.python and newest.extra == era.extra
        assert Version(newest.lightning) > Version(era.lightning)
        assert f"lightning=={newest.lightning}" in newest.requirements
        assert newest.identity["lightning_of"] == era.name and era.identity["lightning_of"] is None
        assert "only the cases that use Lightning" in newest.description
    assert {s.name for s in SESSIONS if matrix.LIGHTNING in s.tags} == {s.name for s in axis.values()}
    assert "cpu_torch25_py310_pyg_lightning_newest" in NAMES


def test_lightning_sessions_run_only_the_cases_that_use_lightning():
    from harness.core import pytestrun

    assert "--lightning-cases" in pytestrun.case_options(matrix.find("cpu_torch25_lightning_newest", SESSIONS))
    assert "--lightning-cases" not in pytestrun.case_options(matrix.find("cpu_torch25", SESSIONS))


def lightning_newest(*args):
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run([sys.executable, "-m", "harness", "lightning-newest", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def registry_reachable() -> bool:
    try:
        lightning_releases.releases("lightning")
    except lightning_releases.RegistryError:
        return False
    return True


@pytest.mark.skipif("not registry_reachable()", reason="the package registry is not reachable")
def test_the_recorded_newest_lightning_is_what_the_releases_metadata_gives():
    # Through the command that writes it: exit 0 only when every row records what the registry resolves.
    done = lightning_newest()
    assert done.returncode == 0, done.stdout + done.stderr
    for session in (s for s in SESSIONS if s.lightning_of):
        assert f"torch {session.torch}" in done.stdout and f"newest supporting it {session.lightning}" in done.stdout


@pytest.mark.skipif("not registry_reachable()", reason="the package registry is not reachable")
def test_lightning_newest_write_records_the_resolved_release(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(ROW + 'lightning_newest = "2.4.0"\nextra = ["setuptools"]\n\n' + ROW.replace('"3.11"', '"3.10"')
                    + 'extra = ["setuptools"]\nlabel = "py310"\n')
    stale = lightning_newest("--matrix", str(path))
    assert stale.returncode == 1 and stale.stderr.count("\n") == 1, stale.stderr
    assert "(recorded: 2.4.0)" in stale.stdout and "(recorded: none)" in stale.stdout
    written = lightning_newest("--matrix", str(path), "--write")
    assert written.returncode == 0, written.stderr
    axis = [s for s in matrix.load(path) if s.lightning_of]
    assert {s.name for s in axis} == {"cpu_torch25_lightning_newest", "cpu_torch25_py310_lightning_newest"}
    assert len({s.lightning for s in axis}) == 1 and Version(axis[0].lightning) > Version("2.4.0")
    assert lightning_newest("--matrix", str(path)).returncode == 0
