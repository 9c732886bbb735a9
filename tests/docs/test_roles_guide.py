"""The roles guide shows the permission tree the service enforces, names every permission-checked route, and
its commands run as written."""

from __future__ import annotations

import shlex

from docs_pages import DOCS, code_blocks

from wasm_runner_server.cli.console import main
from wasm_runner_server.security import permissions
from wasm_runner_server.security.routes import admin, audit, members

GUIDE = DOCS / "guides" / "roles-and-permissions.md"


def test_the_guide_shows_the_permission_tree_and_the_roles_rights():
    assert permissions.markdown_table() in GUIDE.read_text()


def test_the_guide_names_each_route_with_its_permission():
    page = GUIDE.read_text()
    for table in (admin.routes, audit.routes, members.routes):
        for route in table:
            spec = route.handler.__openapi__  # type: ignore[attr-defined]
            rows = [line for line in page.splitlines() if line.startswith("| ") and route.path.split("{")[0] in line
                    and f"`{spec.permission}`" in line]
            assert rows, (route.method, route.path, spec.permission)


def test_the_guides_commands_run_as_written(tmp_path):
    (block,) = [b for b in code_blocks(GUIDE, "bash") if b.startswith("wasm-runner members list")]
    for line in block.splitlines():
        argv = shlex.split(line)[1:]
        if argv != ["roles", "permissions"]:
            argv += ["--data-dir", str(tmp_path)]
        assert main(argv) == 0, line
