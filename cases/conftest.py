"""Parameters every case can ask for by name; the harness plugin records each case."""

import pytest

pytest_plugins = ["harness.plugin"]

NO_GPU = "no CUDA device: torch.cuda.is_available() is False"

PARAMETERS = {
    "device": [
        "cpu",
        # A string condition is evaluated where the case runs (the case module imports torch), so
        # the process that only distributes cases never has to import torch.
        pytest.param("cuda", marks=pytest.mark.skipif("not torch.cuda.is_available()", reason=NO_GPU)),
    ],
    "backend": ["eager", "aot_eager", "inductor"],
    "fullgraph": [False, True],
}


def pytest_generate_tests(metafunc):
    # A case that takes `device`, `backend` or `fullgraph` runs over every value, unless it
    # parametrizes that argument itself.
    own = {arg for marker in metafunc.definition.iter_markers("parametrize")
           for arg in (marker.args[0].split(",") if isinstance(marker.args[0], str) else marker.args[0])}
    for name, values in PARAMETERS.items():
        if name in metafunc.fixturenames and name not in {a.strip() for a in own}:
            ids = ["fullgraph" if v is True else "graphbreaks" if v is False else None for v in values] \
                if name == "fullgraph" else None
            metafunc.parametrize(name, values, ids=ids)
