"""The defaults table of docs/guides/teams.md is the code's."""

from __future__ import annotations

import re
from pathlib import Path

from wasm_runner_server.config import ServiceConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "teams.md"


def test_every_default_in_the_table_is_the_settings_default():
    config = ServiceConfig()
    rows = [line for line in PAGE.read_text().splitlines() if re.match(r"\| .*\| `(auth|sessions)\.", line)]
    assert len(rows) >= 7
    for row in rows:
        _, what, default, settings, _ = row.split("|")
        seconds = float(re.findall(r"([\d,]+) s\b", default)[0].replace(",", ""))  # the first figure in seconds
        value: object = config
        for part in re.findall(r"`([a-z_.]+)`", settings)[0].split("."):  # the first setting named
            value = getattr(value, part)
        assert seconds == value, f"{what.strip()}: the page says {default.strip()}, the code {value}"
