import pytest

from harness import matrix
from packaging.version import Version

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


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("oldest", {"cpu_torch21", "cuda12_torch21", "cuda11_torch21"}),
        ("latest", {"cpu_torch215", "cuda13_torch215", "cuda12_torch215"}),
        ("nightly", {"cpu_torch_nightly", "cuda13_torch_nightly"}),
    ],
)
def test_tags_select_groups(tag, expected):
    assert {s.name for s in SESSIONS if tag in s.tags} == expected


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
    ],
)
def test_malformed_table_is_a_clear_error(tmp_path, text, error):
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    with pytest.raises(matrix.MatrixError, match=error):
        matrix.load(path)


def test_adding_a_version_is_one_row(tmp_path):
    text = matrix.MATRIX_FILE.read_text().replace(
        "# Pre-release wheels", '[[torch]]\ntorch = "2.16.0"\nlightning = "2.7.0"\npython = "3.12"\n'
        'pypi_cuda = "13.2"\ncuda = ["pypi"]\nextra = ["setuptools"]\n\n# Pre-release wheels'
    )
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    sessions = {s.name: s for s in matrix.load(path)}
    assert {"cpu_torch216", "cuda13_torch216"} <= set(sessions)
    assert "latest" in sessions["cpu_torch216"].tags and "latest" not in sessions["cpu_torch215"].tags
