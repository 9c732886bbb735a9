"""An execution error's hint reaches the model in the tool result's text, not only its structure."""

from __future__ import annotations

import mcp_types as types
from mcp_connect import Connect

from wasm_runner.hints import data_module_hint


async def test_a_webassembly_import_of_pandas_says_in_the_text_which_profile_has_it(connect: Connect) -> None:
    async with connect() as session:
        result = await session.call_tool("sandbox_execute_code", {"code": "import pandas as pd"})
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert "error: ModuleNotFoundError: No module named 'pandas'" in text
    assert f"hint: {data_module_hint('pandas')}" in text
    assert result.structured_content["error"]["hint"] == data_module_hint("pandas")
