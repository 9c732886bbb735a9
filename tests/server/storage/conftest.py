import pytest
from s3_server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3() -> S3Server:
    with s3_server() as server:
        yield server
