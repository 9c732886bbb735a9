"""Rich outputs through MCP: a figure a native kernel shows is image content, a table reads as text."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest
from mcp_connect import HttpService, connect_http

from wasm_runner.providers.native.bwrap import find_bwrap
from wasm_runner.providers.native.toolchain import find_python_data

pytestmark = pytest.mark.skipif(find_bwrap() is None or find_python_data() is None,
                                reason="needs bubblewrap and the python-data environment (wasm-runner prepare)")


async def test_a_shown_figure_is_image_content_and_a_dataframe_reads_as_plain_text(http_service: HttpService) -> None:
    async with connect_http(http_service) as session:
        new = await session.call_tool("session_new", {"profile": "python-data"})
        assert not new.is_error, new.content
        code = ("import matplotlib.pyplot as plt, pandas as pd\n"
                "plt.plot([1, 4, 2]); plt.show()\n"
                "pd.DataFrame({'city': ['Paris', 'Oslo']})")
        result = await session.call_tool("sandbox_execute_code", {"code": code, "limits": {"timeout_s": 60}})
    assert not result.is_error, result.content
    images = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
    outputs = result.structured_content["outputs"]
    assert [o["type"] for o in outputs] == ["image/png", "text/html"]
    assert outputs[0]["data"] == ""  # the bytes travel once, as the image content
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert "Paris" in text and "<table" not in text
