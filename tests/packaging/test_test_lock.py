"""requirements/test.lock (scripts/lock) pins what the suite installs: it agrees with the project's own pins,
and this environment is the locked one (the versions the suite passes with)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OWN = {"wasm-runner", "wasm-runner-client"}
"""The project's own distributions: installed from this checkout, never from the lock."""


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "test.lock").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$", line)
        if match:
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_the_lock_holds_every_exact_pin_of_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    lock = locked()
    exact = {}
    for text in requirements:
        requirement = Requirement(text)
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        if pins and canonicalize_name(requirement.name) not in OWN:
            exact[canonicalize_name(requirement.name)] = pins[0]
    assert exact, "the project pins some packages exactly"
    wrong = {name: (pin, lock.get(name)) for name, pin in exact.items() if lock.get(name) != pin}
    assert not wrong, f"(pyproject pin, lock) differ: {wrong}; run scripts/lock"


def test_this_environment_is_the_locked_one():
    differ = {}
    for name, pin in locked().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue  # a package only some platform needs
        if installed != pin:
            differ[name] = (pin, installed)
    assert not differ, f"(locked, installed) differ: {differ}; run scripts/install (or scripts/lock after a change)"
