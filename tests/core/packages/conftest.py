import pytest
from package_index import demo_wheels, serve_index


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A loopback PEP 503 index with tinyapp (needs tinydep), tinydep 2.0/2.1 and a native-tagged fastext."""
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served


@pytest.fixture
def fresh_index(index):
    index.reset()
    return index
