"""A one-shot run's request names the files to return `output_files`, as its result does; the old
name `outputs` (which a result uses for display outputs) is still read, for one version."""

from __future__ import annotations

import msgspec
import pytest
from server_helpers import call

from wasm_runner_protocol.wire import OneShotBody

CODE = "open('out.txt', 'w').write('done')"


async def test_output_files_returns_the_files_and_the_old_name_still_does(client) -> None:
    for name in ("output_files", "outputs"):
        status, result = await call(client, "POST", "/v1/exec", json={"code": CODE, name: ["out.txt", "none.txt"]})
        assert status == 200, result
        assert result["output_files"]["out.txt"]["content"] == "done", name
        assert result["missing_outputs"] == ["none.txt"]
    status, result = await call(client, "POST", "/v1/exec",
                                json={"code": CODE, "output_files": ["out.txt"], "outputs": ["out.txt"]})
    assert status == 422 and "output_files" in result["error"]["message"], result


def test_the_wire_reads_the_old_name_as_the_new_and_marks_it_deprecated() -> None:
    body = msgspec.json.decode(b'{"code": "1", "outputs": ["a.txt"]}', type=OneShotBody)
    assert body.output_files == ["a.txt"] and body.outputs == []
    schema = msgspec.json.schema(OneShotBody)
    fields = schema["$defs"]["OneShotBody"]["properties"]
    assert fields["outputs"]["deprecated"] is True and "deprecated" not in fields["output_files"]


def test_the_python_client_warns_on_the_old_keyword() -> None:
    from wasm_runner_client import calls

    with pytest.warns(DeprecationWarning, match="output_files"):
        body = calls.one_shot_body("1", path=None, command=None, language=None, files=None, output_files=(),
                                   stdin="", env=None, limits=None, profile=None, id=None, outputs=["a.txt"])
    assert body.output_files == ["a.txt"]
