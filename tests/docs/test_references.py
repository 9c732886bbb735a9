"""The generated reference pages cover what the code has: every config key, error code, CLI
command, MCP tool and HTTP route, each found here from the code itself, not from a list."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any, get_args, get_origin

import pytest
from docs_pages import references
from pydantic import BaseModel

from wasm_runner.profiles import CredentialConfig, MountConfig, Profile
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.cli import console
from wasm_runner_server.config import ServiceConfig

REFERENCES = references()


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        annotation: Any = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _model_keys(annotation, f"{prefix}{name}.")
        elif get_origin(annotation) is dict and get_args(annotation)[1] is Profile:
            keys |= _model_keys(Profile, f"{prefix}{name}.NAME.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def _documented_keys(page: str) -> set[str]:
    """`section.key` for each row of the page's tables, under the section heading above it."""
    keys: set[str] = set()
    section = ""
    for line in page.splitlines():
        heading = re.match(r"^## (?:`\[(.+)\]`|Top level)$", line)
        if heading:
            section = heading.group(1) or ""
        row = re.match(r"^\| `([^`]+)` \|", line)
        if row:
            keys.add(f"{section}.{row.group(1)}" if section else row.group(1))
    return keys


def test_every_config_key_is_in_the_configuration_reference() -> None:
    expected = _model_keys(ServiceConfig)
    expected |= _model_keys(MountConfig, "profiles.NAME.mounts[].")
    expected |= _model_keys(CredentialConfig, "profiles.NAME.network.credentials[].")
    documented = _documented_keys(REFERENCES.config_page())
    assert sorted(expected - documented) == []
    assert sorted(documented - expected) == []


def test_config_keys_carry_their_docstrings() -> None:
    page = REFERENCES.config_page()
    assert "| `first_run_key` | bool | `true` |" in page
    assert "print it once" in page  # AuthSettings.first_run_key's attribute docstring
    assert ("| `queue_size` | int | `64` | ≥ `0` | Executions waiting for a slot; beyond it requests get 429 with "
            "Retry-After (a workspace with none waiting may still queue one). |") in page


def test_every_error_code_is_in_the_error_reference() -> None:
    page = REFERENCES.errors_page()
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.M))
    assert sorted(code.value for code in ErrorCode if code.value not in rows) == []


def test_error_codes_show_the_status_and_hint_they_are_raised_with() -> None:
    page = REFERENCES.errors_page()
    assert re.search(r"^\| `session_not_found` \| 404 \| [^|]*create one with POST /v1/sessions", page, re.M)
    assert re.search(r"^\| `rate_limited` \| 429 \| retry after the number of seconds in Retry-After", page, re.M)


def _help(*words: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        console.main([*words, "--help"])
    return out.getvalue()


def _commands(*words: str) -> list[tuple[str, ...]]:
    """Every command below `words`, from what `wasm-runner ... --help` prints."""
    choices = re.search(r"^  \{([a-z0-9,-]+)\}$", _help(*words), re.M)  # the subcommands' line of the positionals
    if choices is None:
        return [words]
    found = [words]
    for name in choices.group(1).split(","):
        found += _commands(*words, name)
    return found


def test_every_cli_command_is_in_the_cli_reference() -> None:
    page = REFERENCES.cli_page()
    commands = _commands()
    assert len(commands) > 10
    missing = [" ".join(words) for words in commands if f"## `{' '.join(('wasm-runner', *words))}`" not in page]
    assert missing == []


def test_the_cli_reference_shows_each_commands_help() -> None:
    page = REFERENCES.cli_page()
    assert "--allow-net HOST[:PORT]" in page  # an option of `run`
    assert "revoke a key by its prefix" in page  # a subcommand of `keys`


def test_every_mcp_tool_is_in_the_mcp_reference() -> None:
    from wasm_runner_server.mcp.catalog import TOOLS

    page = REFERENCES.mcp_page()
    assert len(TOOLS) >= 18
    assert [tool.name for tool in TOOLS if f"| `{tool.name}` |" not in page] == []


def test_every_route_of_the_openapi_document_is_in_the_http_reference() -> None:
    document = REFERENCES.openapi_document()
    page = REFERENCES.http_page(document)
    missing = [f"{method.upper()} {path}" for path, methods in document["paths"].items() for method in methods
               if f"| {method.upper()} | `{path}` |" not in page]
    assert document["paths"] and missing == []
    assert "/v1/sessions/{id}/exec" in document["paths"]
