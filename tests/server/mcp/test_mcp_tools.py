"""The MCP tools through the official client (mcp.ClientSession), over stdio and streamable HTTP."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import zlib
from typing import Any

import aiohttp
import httpx
import mcp_types as types
import pytest
from mcp_connect import Connect, HttpService, connect_http

from wasm_runner_protocol.wire import ExecBody, FileEdit, GlobQuery, GrepQuery, ListQuery, ProcessBody
from wasm_runner_server.mcp.arguments import ExecuteCodeArgs
from wasm_runner_server.mcp.catalog import INSTRUCTIONS
from wasm_runner_server.mcp.tools import MAX_INLINE_BYTES, input_schema

EXPECTED_TOOLS = {"sandbox_execute_code", "read_file", "write_file", "edit_file", "list_files", "glob", "grep",
                  "run_process", "session_new", "session_list", "session_reset", "session_fork", "publish_artifact",
                  "install_packages", "start_process", "process_output", "send_input", "stop_process",
                  "preview_url", "sandbox_tools_api"}

# Plain Python (no matplotlib in WASI): a bar chart drawn into RGB pixels, written as a PNG with zlib + struct.
PNG_CHART = r'''
import struct, zlib

W, H = 120, 80
values = [3, 7, 5, 9, 4, 6]
bar = W // len(values)
rows = []
for y in range(H):
    row = bytearray(b"\x00")                      # filter type: none
    for x in range(W):
        i = min(x // bar, len(values) - 1)
        inside = H - y <= values[i] * H // 10 and 1 < x % bar < bar - 2
        row += bytes((40, 110, 200) if inside else (255, 255, 255))
    rows.append(bytes(row))

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))
with open("chart.png", "wb") as f:
    f.write(png)
print("wrote chart.png", len(png), "bytes")
'''


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def images_of(result: types.CallToolResult) -> list[types.ImageContent]:
    return [c for c in result.content if isinstance(c, types.ImageContent)]


def ok(result: types.CallToolResult) -> types.CallToolResult:
    assert not result.is_error, text_of(result)
    return result


def assert_png_chart(image: types.ImageContent, width: int = 120, height: int = 80) -> None:
    assert image.mime_type == "image/png"
    data = base64.b64decode(image.data)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (width, height)
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    pixels = zlib.decompress(data[41:41 + length])
    assert len(pixels) == height * (1 + 3 * width)
    assert bytes((40, 110, 200)) in pixels and bytes((255, 255, 255)) in pixels  # bars on a white ground


async def test_lists_every_tool_with_input_schemas_from_the_http_wire(connect: Connect) -> None:
    async with connect() as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == EXPECTED_TOOLS
    execute = listed["sandbox_execute_code"]
    assert execute.input_schema == input_schema(ExecuteCodeArgs)
    properties = execute.input_schema["properties"]
    assert {"code", "language", "harness", "tests", "limits", "session"} <= set(properties)
    assert set(ExecBody.__struct_fields__) <= set(properties)  # every field of the HTTP body
    assert execute.input_schema["$defs"]["LimitsPatch"]["properties"]["timeout_s"]["maximum"] == 3600
    for name, wire in (("run_process", ProcessBody), ("edit_file", FileEdit), ("list_files", ListQuery),
                       ("glob", GlobQuery), ("grep", GrepQuery)):
        assert set(wire.__struct_fields__) <= set(listed[name].input_schema["properties"]), name
        assert "session" in listed[name].input_schema["properties"]
    assert listed["read_file"].annotations.read_only_hint is True
    assert listed["session_reset"].annotations.destructive_hint is True
    assert execute.output_schema["properties"]["session"] == {"type": "string"}


async def test_python_png_chart_comes_back_as_image_content(connect: Connect) -> None:
    async with connect() as session:
        result = ok(await session.call_tool("sandbox_execute_code", {"code": PNG_CHART, "language": "python"}))
        assert "wrote chart.png" in text_of(result)
        assert "files created: chart.png" in text_of(result)
        [image] = images_of(result)
        assert_png_chart(image)
        assert result.structured_content["images"] == ["chart.png"]
        assert result.structured_content["files"]["created"] == ["chart.png"]
        # and read back as an image, by path
        [again] = images_of(ok(await session.call_tool("read_file", {"path": "chart.png"})))
        assert again.data == image.data


async def test_every_file_tool_round_trips(connect: Connect) -> None:
    async with connect() as session:
        written = ok(await session.call_tool("write_file", {"path": "notes/todo.txt",
                                                            "content": "alpha\nbeta\ngamma\n"}))
        assert written.structured_content == {"path": "notes/todo.txt", "size": 17, "created": True}
        read = ok(await session.call_tool("read_file", {"path": "notes/todo.txt"}))
        assert text_of(read) == "alpha\nbeta\ngamma\n"

        edited = ok(await session.call_tool("edit_file", {"path": "notes/todo.txt", "old_text": "beta",
                                                          "new_text": "BETA"}))
        assert edited.structured_content["replacements"] == 1
        patch = "--- a/notes/todo.txt\n+++ b/notes/todo.txt\n@@ -3 +3 @@\n-gamma\n+delta\n"
        ok(await session.call_tool("edit_file", {"path": "notes/todo.txt", "patch": patch}))
        assert text_of(ok(await session.call_tool("read_file", {"path": "notes/todo.txt"}))) == "alpha\nBETA\ndelta\n"

        blob = bytes(range(256))
        ok(await session.call_tool("write_file", {"path": "data/blob.bin", "encoding": "base64",
                                                  "content": base64.b64encode(blob).decode()}))
        binary = ok(await session.call_tool("read_file", {"path": "data/blob.bin"}))
        [resource] = [c for c in binary.content if isinstance(c, types.EmbeddedResource)]
        assert base64.b64decode(resource.resource.blob) == blob

        listing = ok(await session.call_tool("list_files", {"recursive": True}))
        paths = {e["path"]: e for e in listing.structured_content["entries"]}
        assert paths["notes/todo.txt"]["size"] == len("alpha\nBETA\ndelta\n")
        assert paths["data"]["type"] == "directory" and "data/blob.bin" in paths
        assert "notes/todo.txt" in text_of(listing)

        globbed = ok(await session.call_tool("glob", {"pattern": "**/*.{txt,bin}"}))
        assert [m["path"] for m in globbed.structured_content["matches"]] == ["data/blob.bin", "notes/todo.txt"]

        grepped = ok(await session.call_tool("grep", {"pattern": "^d.l", "glob": "*.txt"}))
        assert grepped.structured_content["matches"] == [{"path": "notes/todo.txt", "line": 3, "text": "delta"}]
        assert "notes/todo.txt:3: delta" in text_of(grepped)

        # the code sees what the file tools wrote, and the file tools see what the code wrote
        run = ok(await session.call_tool("sandbox_execute_code", {
            "code": "open('notes/out.txt', 'w').write(open('notes/todo.txt').read().upper())"}))
        assert "files created: notes/out.txt" in text_of(run)
        assert text_of(ok(await session.call_tool("read_file", {"path": "notes/out.txt"}))) == "ALPHA\nBETA\nDELTA\n"


async def test_kernel_and_files_persist_across_calls_of_one_connection(connect: Connect) -> None:
    async with connect() as session:
        first = ok(await session.call_tool("sandbox_execute_code", {"code": "x = 41\nopen('keep.txt','w').write('k')"}))
        second = ok(await session.call_tool("sandbox_execute_code", {"code": "x + 1"}))
        assert second.structured_content["value"] == "42"
        assert second.structured_content["session"] == first.structured_content["session"]
        assert second.structured_content["kernel_restarted"] is False
        assert text_of(ok(await session.call_tool("read_file", {"path": "keep.txt"}))) == "k"


async def test_another_connection_gets_its_own_session_and_may_name_the_first(http_service: HttpService) -> None:
    async with connect_http(http_service) as one, connect_http(http_service) as two:
        first = ok(await one.call_tool("sandbox_execute_code", {"code": "secret = 'one'"}))
        sid = first.structured_content["session"]
        fresh = await two.call_tool("sandbox_execute_code", {"code": "secret"})
        assert fresh.structured_content["session"] != sid
        assert fresh.structured_content["error"]["type"] == "NameError"
        named = ok(await two.call_tool("sandbox_execute_code", {"code": "secret", "session": sid}))
        assert named.structured_content["value"] == "'one'"


async def test_failures_are_tool_errors_with_the_http_messages(http_service: HttpService) -> None:
    async with connect_http(http_service) as session:
        sid = ok(await session.call_tool("write_file", {"path": "a.txt", "content": "x x\n"}))
        sid = (await session.call_tool("sandbox_execute_code", {"code": "1"})).structured_content["session"]
        async with aiohttp.ClientSession() as http:
            async def over_http(method: str, path: str, **kwargs: Any) -> dict:
                async with http.request(method, http_service.url(f"/v1/sessions/{sid}{path}"), **kwargs) as resp:
                    assert resp.status >= 400
                    return await resp.json()

            cases = [
                (("read_file", {"path": "missing.txt"}), ("GET", "/files/missing.txt", {})),
                (("read_file", {"path": "../etc/passwd"}), ("GET", "/files/..%2Fetc%2Fpasswd", {})),
                (("edit_file", {"path": "a.txt", "old_text": "x", "new_text": "y"}),
                 ("PATCH", "/files/a.txt", {"json": {"old_text": "x", "new_text": "y"}})),
                (("glob", {"pattern": "[z-a]"}), ("GET", "/glob", {"params": {"pattern": "[z-a]"}})),
                (("grep", {"pattern": "x", "glob": "*.[z-a]"}),
                 ("GET", "/grep", {"params": {"pattern": "x", "glob": "*.[z-a]"}})),
                (("sandbox_execute_code", {"code": 5}), ("POST", "/exec", {"json": {"code": 5}})),
                (("sandbox_execute_code", {"code": "1", "limits": {"timeout_s": 99999}}),
                 ("POST", "/exec", {"json": {"code": "1", "limits": {"timeout_s": 99999}}})),
                (("sandbox_execute_code", {"code": "1", "profile": "nope"}),
                 ("POST", "/exec", {"json": {"code": "1", "profile": "nope"}})),
            ]
            for (tool, args), (method, path, kwargs) in cases:
                result = await session.call_tool(tool, args)
                assert result.is_error, (tool, args)
                expected = await over_http(method, path, **kwargs)
                assert result.structured_content == expected, (tool, args)
                assert text_of(result).startswith(f"{expected['error']['code']}: {expected['error']['message']}")
        unknown = await session.call_tool("sandbox_execute_code", {"code": "1", "session": "no-such-session"})
        assert unknown.is_error and unknown.structured_content["error"]["code"] == "session_not_found"


async def test_a_guest_error_is_a_result_naming_the_line(connect: Connect) -> None:
    async with connect() as session:
        result = ok(await session.call_tool("sandbox_execute_code", {"code": "a = 1\nb = a / 0\n"}))
        assert result.structured_content["error"]["type"] == "ZeroDivisionError"
        assert "error: ZeroDivisionError" in text_of(result) and "line 2" in text_of(result)



async def test_typescript_runs_through_sandbox_execute_code(connect: Connect) -> None:
    async with connect() as session:
        schema = (await session.list_tools()).tools
        execute = next(tool for tool in schema if tool.name == "sandbox_execute_code")
        assert "typescript" in json.dumps(execute.input_schema)
        result = ok(await session.call_tool("sandbox_execute_code", {
            "code": "enum E { A = 40 }\nconst n: number = E.A + 2;\nconsole.log(n);\n", "language": "typescript"}))
    assert result.structured_content["stdout"] == "42\n"


async def test_the_check_harness_gives_a_verdict(connect: Connect) -> None:
    async with connect() as session:
        checked = await session.call_tool("sandbox_execute_code", {
            "code": "def add(a, b):\n    return a - b\n", "harness": "check", "tests": "assert add(2, 2) == 4\n"})
    assert ok(checked).structured_content["verdict"] == "failed"
    assert "verdict: failed" in text_of(checked)


async def test_session_tools_new_list_and_reset(http_service: HttpService) -> None:
    async with connect_http(http_service) as session:
        first = ok(await session.call_tool("sandbox_execute_code", {"code": "x = 1\nopen('f.txt','w').write('1')"}))
        old = first.structured_content["session"]
        new = ok(await session.call_tool("session_new", {"metadata": {"purpose": "test"}}))
        new_id = new.structured_content["id"]
        assert new_id != old and new.structured_content["metadata"] == {"purpose": "test"}
        moved = await session.call_tool("sandbox_execute_code", {"code": "x"})
        assert moved.structured_content["session"] == new_id
        assert moved.structured_content["error"]["type"] == "NameError"

        listed = ok(await session.call_tool("session_list", {}))
        assert {old, new_id} <= {s["id"] for s in listed.structured_content["sessions"]}
        assert f"{new_id}  " in text_of(listed) and "(this connection)" in text_of(listed)

        ok(await session.call_tool("sandbox_execute_code", {"code": "x = 2", "session": old}))
        forked = ok(await session.call_tool("session_fork", {"session": old, "count": 2}))
        copies = [s["id"] for s in forked.structured_content["sessions"]]
        assert len(copies) == 2 and all(c in text_of(forked) for c in copies)
        in_copy = ok(await session.call_tool("sandbox_execute_code", {"code": "x = x + 1\nx", "session": copies[0]}))
        assert in_copy.structured_content["value"] == "3"
        reset = ok(await session.call_tool("session_reset", {"session": old}))
        assert reset.structured_content["id"] == old and reset.structured_content["state"] == "idle"
        after = await session.call_tool("sandbox_execute_code", {"code": "x", "session": old})
        assert after.structured_content["error"]["type"] == "NameError"
        gone = ok(await session.call_tool("list_files", {"session": old}))
        assert gone.structured_content["entries"] == []


NATIVE_CHART = PNG_CHART.replace("chart.png", "native.png")


@pytest.mark.skipif(shutil.which("bwrap") is None,
                    reason="bubblewrap is not installed (scripts/install-native.sh installs it as root)")
async def test_run_process_returns_images_written_natively(connect: Connect) -> None:
    async with connect() as session:
        ok(await session.call_tool("write_file", {"path": "plot.py", "content": NATIVE_CHART}))
        svg = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5" height="9"/></svg>'
        result = await session.call_tool("run_process", {"command": [
            "sh", "-c", f"python3 plot.py && printf '%s' '{svg}' > bars.svg"]})
        ok(result)
        assert result.structured_content["isolation"] == "bubblewrap"
        images = {img.mime_type: img for img in images_of(result)}
        assert set(images) == {"image/png", "image/svg+xml"}
        assert_png_chart(images["image/png"])
        assert base64.b64decode(images["image/svg+xml"].data).decode() == svg
        assert result.structured_content["images"] == ["bars.svg", "native.png"]


def test_the_cli_command_parses_and_names_its_handler(tmp_path) -> None:
    import argparse

    from wasm_runner_server.cli.commands import add_mcp_command
    from wasm_runner_server.mcp.stdio import run_mcp

    parser = argparse.ArgumentParser(prog="wasm-runner")
    add_mcp_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mcp", "--data-dir", str(tmp_path), "--profile", "python", "--no-warm"])
    assert args.handler.resolve() is run_mcp and args.data_dir == tmp_path and args.warm is False
    assert json.loads(json.dumps(INSTRUCTIONS))  # plain text, no surprises


async def test_publish_artifact_answers_the_artifact_and_a_link_that_needs_no_key(http_service: HttpService) -> None:
    async with connect_http(http_service) as session:
        ok(await session.call_tool("write_file", {"path": "out/summary.md", "content": "# Done\n"}))
        result = ok(await session.call_tool("publish_artifact", {"path": "out/summary.md", "note": "for the user"}))
        published = result.structured_content
        assert published["name"] == "summary.md" and published["note"] == "for the user"
        assert published["url"] in text_of(result) and "/v1/artifact-links/" in published["url"]
    async with httpx.AsyncClient() as http:
        response = await http.get(published["url"])
        assert response.status_code == 200 and response.content == b"# Done\n"


async def test_a_large_file_comes_back_as_a_link_not_inline(http_service: HttpService) -> None:
    big = "x" * (MAX_INLINE_BYTES + 1)
    async with connect_http(http_service) as session:
        ok(await session.call_tool("write_file", {"path": "big.txt", "content": big}))
        result = ok(await session.call_tool("read_file", {"path": "big.txt"}))
        text = text_of(result)
        assert len(text) < 1000 and "download it from" in text
        url = text.split("download it from ", 1)[1].split(" ", 1)[0]
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).text == big


async def test_install_packages_then_import_them_in_the_session(tmp_path) -> None:
    from mcp_connect import start_http_service
    from package_index import demo_wheels, serve_index

    with serve_index(demo_wheels(tmp_path / "wheels")) as index:
        service = await start_http_service(tmp_path / "data", packages={"python_index": index.simple})
        try:
            async with connect_http(service) as session:
                installed = ok(await session.call_tool("install_packages", {"python": ["tinyapp==1.0"]}))
                assert "tinyapp==1.0 (download)" in text_of(installed) and installed.structured_content["ok"]
                used = ok(await session.call_tool("sandbox_execute_code", {"code": "import tinyapp\ntinyapp.hello()"}))
                assert used.structured_content["value"] == "'hello from tinyapp, tinydep 2.1'"
                refused = ok(await session.call_tool("install_packages", {"python": ["fastext"]}))
                assert "native_code" in text_of(refused) and "hint:" in text_of(refused)
        finally:
            await service.server.close()
