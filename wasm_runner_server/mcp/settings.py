"""The `[mcp]` table of the service configuration: what one MCP tool result may hand a model.

    [mcp]
    max_result_chars = 20000    # text of one tool result; longer output is cut to its head and tail
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from wasm_runner.profiles import ConfigModel

DEFAULT_MAX_RESULT_CHARS = 20_000
"""About 5 000 tokens: long output fits a model's context many times over a conversation."""


class McpSettings(ConfigModel):
    max_result_chars: Annotated[int, Field(ge=2_000, le=1_000_000)] = DEFAULT_MAX_RESULT_CHARS
    """Characters of text one tool result gives a model at most (its text content, and again its structured
    content). Longer output comes back as its head and tail with a count of what was cut; the full output
    stays in the session's workspace, reachable as a resource link (and a presigned link over HTTP)."""
