import pytest
from postgres_server import PostgresServer, postgres_server


@pytest.fixture(scope="session")
def postgres() -> PostgresServer:
    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """A fresh database on the test run's PostgreSQL server."""
    return postgres.new_database()
