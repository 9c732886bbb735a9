"""The `[e2b]` table of the service configuration: the E2B-compatible API (off by default).

    [e2b]
    enabled = true
    prefix = "/e2b"                       # E2B_API_URL = <service>/e2b, E2B_SANDBOX_URL = <service>/e2b/sandbox
    templates = { base = "bash", code-interpreter-v1 = "bash" }
    code_profile = "python-data"          # what `run_code` runs Python with
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from wasm_runner.profiles import ConfigModel


class E2bSettings(ConfigModel):
    enabled: bool = False
    """Answer E2B's control plane, envd's Connect-RPC services and the code interpreter's /execute."""
    prefix: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~-]+$")] = "/e2b"
    """Where the API is mounted: E2B_API_URL is the service's URL plus this prefix, E2B_SANDBOX_URL
    that plus /sandbox."""
    templates: dict[str, str] = {"base": "bash", "code-interpreter-v1": "bash"}
    """E2B template name -> the profile of the session a new sandbox opens (an unknown name is refused)."""
    code_profile: str = "python-data"
    """The profile `run_code` runs Python with, in the sandbox's session (its kernel keeps state)."""
    upstream: str | None = None
    """The service's own API as the gateway calls it (default: the address the request came in on)."""
