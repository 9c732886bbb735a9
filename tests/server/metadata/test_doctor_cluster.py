"""`wasm-runner doctor --config` checks the cluster's parts the config names: the database (reachable, its
schema, its clock) and the object store (write, read back, delete), and says what fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.metadata.postgres import acquire, release
from wasm_runner_server.storage.objects import open_objects


def doctor(tmp_path: Path, config: str) -> tuple[int, dict]:
    path = tmp_path / "config.toml"
    path.write_text(config)
    done = subprocess.run([sys.executable, "-m", "wasm_runner_server.cli.console", "doctor", "--json", "--config",
                           str(path)], capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


def storage_toml(settings: dict) -> str:
    return "[storage]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())


def test_a_reachable_cluster_passes_and_the_probe_leaves_nothing(tmp_path, postgres_url, s3):
    release(acquire(ServiceConfig.model_validate({"store": {"url": postgres_url}}).store))  # migrated, as by a node
    settings = s3.settings()
    _, report = doctor(tmp_path, f'[store]\nurl = "{postgres_url}"\n' + storage_toml(settings))
    store, storage = report["cluster"]["store"], report["cluster"]["storage"]
    assert store["ok"] and store["schema_version"] == store["expected_version"], store
    assert abs(store["clock_skew_s"]) < 1
    assert storage["ok"], storage
    objects = open_objects(ServiceConfig.model_validate({"storage": settings}).storage)
    assert list(objects.keys(settings["prefix"])) == []  # the probe object was deleted


def test_unreachable_parts_fail_saying_what_went_wrong(tmp_path, s3):
    settings = {**s3.settings(), "bucket": "no-such-bucket"}
    code, report = doctor(tmp_path, '[store]\nurl = "postgresql://wasm:secret@127.0.0.1:9/none"\n'
                          'connect_timeout_s = 2\n' + storage_toml(settings))
    store, storage = report["cluster"]["store"], report["cluster"]["storage"]
    assert code == 1 and not store["ok"] and not storage["ok"]
    assert store["error"] and storage["error"]
    assert "secret" not in json.dumps(report["cluster"])  # the password is never shown


@pytest.mark.parametrize("config", ["", '[store]\nurl = "sqlite"\n'])
def test_one_machine_has_no_cluster_section(tmp_path, config):
    _, report = doctor(tmp_path, config)
    assert "cluster" not in report
