import pytest
from postgres_server import PostgresServer, postgres_server
from s3_server import S3Server, s3_server


@pytest.fixture(scope="session")
def postgres() -> PostgresServer:
    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """A fresh database on the test run's PostgreSQL server."""
    return postgres.new_database()


@pytest.fixture(scope="session")
def s3() -> S3Server:
    """The test run's S3 server (SeaweedFS); each test takes a prefix of its own (`S3Server.settings`)."""
    with s3_server() as server:
        yield server


@pytest.fixture(params=["s3", "posix"])
def storage(request, tmp_path_factory) -> dict[str, object]:
    """Where a cluster's nodes store sessions: the S3 server, or a directory they share (NFS's stand-in)."""
    if request.param == "s3":
        return request.getfixturevalue("s3").settings()
    return {"kind": "posix", "path": str(tmp_path_factory.mktemp("shared-mount"))}
