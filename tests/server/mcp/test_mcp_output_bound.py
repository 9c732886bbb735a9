"""A tool result fits a model's context: long output comes back as its head and tail with a count of
what was cut, and the full output stays reachable (a resource link; over HTTP also a presigned link)."""

from __future__ import annotations

import json
import re

import httpx2
import mcp_types as types
from mcp_connect import Connect, HttpService

BOUND = 20_000
"""The default bound of the text a tool result hands a model (the service config's [mcp] section)."""
LINES = 25_000
LOUD = f"for i in range({LINES}):\n    print(f'line {{i:05d}} ' + 'x' * 24)\n"
EXPECTED = "".join(f"line {i:05d} " + "x" * 24 + "\n" for i in range(LINES))


def _texts(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_a_loop_printing_output_is_bounded_with_head_tail_and_the_full_output_linked(
        connect: Connect, transport: str) -> None:
    async with connect() as session:
        result = await session.call_tool("sandbox_execute_code", {"code": LOUD})
        assert not result.is_error, _texts(result)[:2000]
        text = _texts(result)
        assert len(text) <= BOUND
        assert len(json.dumps(result.structured_content)) <= BOUND + 4096
        assert "line 00000 " in text and f"line {LINES - 1:05d} " in text  # head and tail
        cut = re.search(r"\[(\d[\d,]*) characters cut", text)
        assert cut is not None, text[-3000:]
        assert int(cut.group(1).replace(",", "")) > len(EXPECTED) - BOUND

        links = [c for c in result.content if isinstance(c, types.ResourceLink)]
        assert len(links) == 1
        read = await session.read_resource(str(links[0].uri))
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.text == EXPECTED
    if transport == "http":
        url = re.search(r"download \(no key[^)]*\): (http://\S+?)\]", text)
        assert url is not None, text[-3000:]
        async with httpx2.AsyncClient(timeout=30) as http:  # presigned: no key
            response = await http.get(url.group(1))
        assert response.status_code == 200 and response.text == EXPECTED


async def test_the_bound_is_set_in_the_service_config(tmp_path) -> None:
    from mcp_connect import connect_http, start_http_service

    service: HttpService = await start_http_service(tmp_path / "data", mcp={"max_result_chars": 3000})
    try:
        async with connect_http(service) as session:
            result = await session.call_tool("sandbox_execute_code", {"code": "print('y' * 50_000)"})
            assert not result.is_error, _texts(result)[:2000]
            text = _texts(result)
            assert len(text) <= 3000 and "characters cut" in text
    finally:
        await service.server.close()


async def test_a_large_text_file_read_is_bounded_and_linked(connect: Connect) -> None:
    async with connect() as session:
        written = await session.call_tool("write_file", {"path": "big.txt", "content": EXPECTED})
        assert not written.is_error, _texts(written)
        result = await session.call_tool("read_file", {"path": "big.txt"})
        assert not result.is_error, _texts(result)[:2000]
        text = _texts(result)
        assert len(text) <= BOUND and "line 00000 " in text and f"line {LINES - 1:05d} " in text
        (link,) = [c for c in result.content if isinstance(c, types.ResourceLink)]
        read = await session.read_resource(str(link.uri))
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents) and contents.text == EXPECTED


async def test_a_resource_of_another_session_is_not_readable_without_its_key(http_service: HttpService) -> None:
    from mcp_connect import connect_http

    async with connect_http(http_service) as session:
        result = await session.call_tool("sandbox_execute_code", {"code": LOUD})
        (link,) = [c for c in result.content if isinstance(c, types.ResourceLink)]
        assert str(link.uri).startswith("wasm-runner://sessions/")
        bad = str(link.uri).replace("/files/", "/files/../../")
        try:
            await session.read_resource(bad)
        except Exception as exc:  # the SDK raises the MCP error the server answered
            assert "not a resource of this server" in str(exc)
        else:
            raise AssertionError("a path leaving the workspace was read")


async def test_stdio_in_front_of_a_service_takes_the_bound_from_its_config(tmp_path, http_service: HttpService) -> None:
    from mcp_connect import connect_stdio

    config = tmp_path / "mcp.toml"
    config.write_text("[mcp]\nmax_result_chars = 3000\n")
    data_dir = tmp_path / "unused"
    data_dir.mkdir()
    async with connect_stdio(data_dir, "--url", http_service.url("/"), "--config", str(config)) as session:
        result = await session.call_tool("sandbox_execute_code", {"code": "print('z' * 50_000)"})
        assert not result.is_error, _texts(result)[:2000]
        text = _texts(result)
        assert len(text) <= 3000 and "characters cut" in text
        links = [c for c in result.content if isinstance(c, types.ResourceLink)]
        read = await session.read_resource(str(links[0].uri))
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents) and contents.text == "z" * 50_000 + "\n"
