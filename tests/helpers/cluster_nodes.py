"""Service nodes of a test cluster: each one's data directory and config file, and admin keys made in the
cluster's database."""

from __future__ import annotations

import json
from pathlib import Path

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores

LEASE_S = 2.0
"""The nodes' lease: short, so that a takeover test waits seconds."""


def node_files(tmp_path: Path, url: str, name: str, storage: dict[str, object], extra: str = "") -> tuple[Path, Path]:
    """A node's data directory and config file, on the database at `url` and the `[storage]` given
    (`extra`: more of the config, TOML)."""
    data_dir = tmp_path / name
    config = tmp_path / f"{name}.toml"
    section = "\n".join(f"{k} = {json.dumps(v)}" for k, v in {**storage, "lease_s": LEASE_S}.items())
    config.write_text(f'[store]\nurl = "{url}"\nnode = "{name}"\n[server]\nprepare_on_start = false\n'
                      f"[storage]\n{section}\n{extra}")
    return data_dir, config


def admin_auth(postgres_url: str, data_dir: Path, workspace: str) -> dict[str, str]:
    """The Authorization header of a new admin key of `workspace`, made in the cluster's database."""
    config = ServiceConfig.model_validate({"server": {"data_dir": str(data_dir)}, "store": {"url": postgres_url}})
    tenants = stores.tenant_store(config, data_dir)
    key, _ = tenants.create_key(workspace, "dev", "admin")
    tenants.close()
    return {"Authorization": f"Bearer {key}"}
