"""The service reaches the core through its public methods and never writes into its objects.

Read from the source with `ast` (no import runs): no module of the service assigns an attribute
that the core's live objects (Runner, Session, a background process and the session's process
manager) keep, other than the few listed with the reason they remain. A guest install's rules and
its audit hook go through `Session.set_guest_installs`, a terminal's attach through
`BackgroundProcess.follow`, the process observer through `ProcessManager.observe`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE_OBJECTS = ("wasm_runner/runner.py", "wasm_runner/session.py", "wasm_runner/processes/manager.py")
DATA_OWNERS = {"result", "live.row"}
"""Objects of the service's own or wire data (an ExecResult, a store row) whose field names the core shares."""
KNOWN = {
    # The room a workspace quota leaves, reserved per call: passing it with the call needs the kernel
    # workers' call path to carry it (today it travels from the session to the worker's order).
    ("wasm_runner_server/sessions/manager.py", "session.disk_room"),
    # The caps of a session's processes, read when its manager is made.
    ("wasm_runner_server/sessions/processes.py", "session.process_limits"),
}


def _core_attributes() -> set[str]:
    names = set()
    for path in CORE_OBJECTS:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign | ast.AugAssign) else []
            names |= {t.attr for t in targets if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"
                      and not t.attr.startswith("_")}
    return names


def _writes(attributes: set[str]) -> set[tuple[str, str]]:
    found = set()
    for path in (ROOT / "wasm_runner_server").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign | ast.AugAssign) else []
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    owner = ast.unparse(item.value) if isinstance(item, ast.Attribute) else ""
                    if (isinstance(item, ast.Attribute) and item.attr in attributes
                            and owner not in ("self", "cls") and owner not in DATA_OWNERS):
                        found.add((str(path.relative_to(ROOT)), f"{owner}.{item.attr}"))
    return found


def test_the_service_sets_no_attribute_on_a_core_object() -> None:
    assert sorted(_writes(_core_attributes()) - KNOWN) == []


def test_the_known_writes_still_exist() -> None:
    assert sorted(KNOWN - _writes(_core_attributes())) == []


def test_the_packages_route_installs_through_the_session() -> None:
    """One door: the route calls `Session.install`, not the Runner's installer around the session."""
    source = (ROOT / "wasm_runner_server/http/routes/packages.py").read_text()
    calls = {ast.unparse(node) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)}
    assert "session.install" in calls
    assert not any(name.endswith("packages.install") for name in calls), sorted(calls)
