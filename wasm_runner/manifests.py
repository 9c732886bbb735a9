"""Runtime manifests: the pinned artifact and entry point of each guest runtime."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

RUNTIMES_DIR = Path(str(resources.files("wasm_runner._runtimes")))
"""Package data; a wheel installs it as a real directory, which the guest build copies from."""


@dataclass(frozen=True)
class Manifest:
    language: str
    kind: str
    directory: Path
    fields: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]


def load_manifest(language: str) -> Manifest:
    directory = RUNTIMES_DIR / language
    with open(directory / "manifest.toml", "rb") as f:
        fields = tomllib.load(f)["runtime"]
    return Manifest(language=fields["language"], kind=fields["kind"], directory=directory, fields=fields)
