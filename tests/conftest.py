import pytest

from wasm_runner import Runner


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    """One runner for the whole run: runtimes compile once and stay loaded."""
    with Runner(tmp_path_factory.mktemp("runner")) as r:
        r.providers[0].prepare()  # build and compile both runtimes outside any test's timing
        yield r
