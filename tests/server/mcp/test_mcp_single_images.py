"""An image reaches a model once: a figure shown and also saved to a file is one image content."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest
from mcp_connect import Connect

from wasm_runner.providers.native.bwrap import find_bwrap
from wasm_runner.providers.native.toolchain import find_python_data

pytestmark = pytest.mark.skipif(find_bwrap() is None or find_python_data() is None,
                                reason="needs bubblewrap and the python-data environment (wasm-runner prepare)")


def _images(result: types.CallToolResult) -> list[types.ImageContent]:
    return [c for c in result.content if isinstance(c, types.ImageContent)]


async def test_a_figure_saved_and_shown_comes_back_as_one_image(connect: Connect) -> None:
    async with connect() as session:
        new = await session.call_tool("session_new", {"profile": "python-data"})
        assert not new.is_error, new.content
        code = ("import matplotlib.pyplot as plt\n"
                "fig, ax = plt.subplots(); ax.plot([1, 4, 2])\n"
                "fig.savefig('chart.png')\n"
                "display(fig)")
        result = await session.call_tool("sandbox_execute_code", {"code": code, "limits": {"timeout_s": 60}})
    assert not result.is_error, result.content
    (image,) = _images(result)
    assert image.mime_type == "image/png" and base64.b64decode(image.data).startswith(b"\x89PNG")
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert "chart.png" in text  # named, for read_file
    assert result.structured_content["images"] == ["output:0"]

