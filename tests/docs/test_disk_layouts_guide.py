"""The disk-layouts guide's configuration is what the service accepts, and says what it does."""

from __future__ import annotations

import tomllib

from docs_pages import DOCS, code_blocks

from wasm_runner_server.config import ServiceConfig

PAGE = DOCS / "guides" / "disk-layouts.md"


def test_the_guides_configuration_is_valid_and_chooses_per_workspace() -> None:
    block, own_path = code_blocks(PAGE, "toml")
    auth = ServiceConfig.model_validate({"auth": tomllib.loads(block)["auth"]}).auth
    assert (auth.disk_layout.members, auth.disk_layout.apps) == ("member-disk", "end-user")
    acme = auth.workspace_disk_layouts["acme"]
    assert (acme.members, acme.apps) == ("session", "session")  # the parts it leaves out: the default
    layout = ServiceConfig.model_validate({"auth": tomllib.loads(own_path)["auth"]}).auth.disk_layout
    assert (layout.members, layout.apps, layout.guest_path) == ("member-disk", "end-user", "/home/user/workspace")
