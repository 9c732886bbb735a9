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


@pytest.mark.parametrize("value", ["10.0.0.5:8080", "ftp://node:21", "http://", "http://node:8080/?x=1"])
def test_an_advertise_url_that_other_nodes_could_not_use_is_refused(value):
    with pytest.raises(ValidationError, match="advertise_url is an http"):
        ServiceConfig.model_validate({"store": {"advertise_url": value}})


def test_the_advertise_url_comes_from_the_environment_without_its_trailing_slash():
    store = ServiceConfig.model_validate({}).store
    assert store.advertise_url is None
    assert store.with_environment({"WASM_RUNNER_ADVERTISE_URL": "http://10.0.0.5:8080/"}).advertise_url == \
        "http://10.0.0.5:8080"


@pytest.mark.parametrize("value", ["journals", "/mnt/../etc", "/mnt/./x"])
def test_a_journal_directory_is_an_absolute_plain_path(value):
    with pytest.raises(ValidationError, match="journal_dir is an absolute directory path"):
        ServiceConfig.model_validate({"store": {"journal_dir": value}})
