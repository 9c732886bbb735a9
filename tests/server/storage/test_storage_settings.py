"""`[storage]` is checked when the configuration is read, with messages that say what to write."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.storage import StorageSettings, open_storage


@pytest.mark.parametrize(("field", "value", "says"), [
    ("prefix", "../other-tenant/", "storage.prefix"),
    ("prefix", "no-slash", "storage.prefix"),
    ("endpoint", "ftp://store.internal", "storage.endpoint"),
    ("endpoint", "https://user:secret@store.internal", "without credentials"),
    ("bucket", "Bad_Bucket", "storage.bucket"),
    ("lease_s", 0, "greater than or equal"),
])
def test_a_bad_storage_section_is_refused_with_what_to_write(field, value, says):
    with pytest.raises(ValidationError, match=says):
        ServiceConfig.model_validate({"storage": {"kind": "s3", "bucket": "sessions", field: value}})


def test_the_secret_is_never_shown_and_comes_from_the_environment():
    settings = StorageSettings.model_validate({"kind": "s3", "bucket": "sessions"})
    loaded = settings.with_environment({"WASM_RUNNER_S3_ACCESS_KEY_ID": "id",
                                        "WASM_RUNNER_S3_SECRET_ACCESS_KEY": "very-secret"})
    assert loaded.access_key_id == "id" and loaded.secret_access_key is not None
    assert "very-secret" not in repr(loaded) and "very-secret" not in str(loaded.model_dump())
    assert loaded.secret_access_key.get_secret_value() == "very-secret"


def test_local_storage_stores_nothing_and_needs_no_s3_client():
    sys.modules.pop("obstore", None)
    storage = open_storage(StorageSettings())
    assert not storage.durable
    assert "obstore" not in sys.modules
