import pytest

from wasm_runner import Runner


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    """One runner for the whole run: runtimes compile once and stay loaded."""
    with Runner(tmp_path_factory.mktemp("runner")) as r:
        r.providers[0].runtime("python").prepare()  # build and compile outside any test's timing
        yield r
