"""Tools from Python callables: schemas from type hints, names, allowlists, and the stubs a model is shown."""

import ast
from typing import Literal, TypedDict

import pytest
from loopback_origin import Origin

from wasm_runner.tools import ToolRegistry, python_stubs, tool, typescript_stubs
from wasm_runner.tools.registry import from_spec
from wasm_runner_protocol.tools import ToolSpec


class Issue(TypedDict):
    id: int
    title: str


def search_issues(query: str, limit: int = 5, state: Literal["open", "closed"] = "open") -> list[Issue]:
    """Search the tracker's issues.

    Args:
        query: words to look for in titles and bodies
        limit: at most this many issues
    """
    return []


def close_issue(issue_id: int) -> None:
    """Close an issue."""


def test_schema_comes_from_type_hints_defaults_and_the_docstring():
    spec = tool(search_issues).spec
    assert spec.name == "search_issues"
    assert spec.description == "Search the tracker's issues."
    parameters = spec.parameters
    assert parameters["required"] == ["query"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["query"] == {"type": "string", "description": "words to look for in titles and bodies"}
    assert parameters["properties"]["limit"] == {"type": "integer", "description": "at most this many issues", "default": 5}
    assert sorted(parameters["properties"]["state"]["enum"]) == ["closed", "open"]
    assert spec.returns is not None and spec.returns["type"] == "array"


@pytest.mark.parametrize("name", ["Search", "search-issues", "import", "a__b", "x_", "_private", ""])
def test_a_tool_name_must_be_snake_case(name):
    with pytest.raises(TypeError, match="snake_case|double underscore"):
        tool(search_issues, name=name)


def test_a_parameter_json_cannot_carry_is_refused_when_the_tool_is_made():
    def takes_a_socket(sock: object.__class__) -> None:  # a type, not a JSON value
        pass

    with pytest.raises(TypeError, match="no JSON schema"):
        tool(takes_a_socket)


def test_a_guest_names_a_tool_in_snake_case_or_camel_case_and_nothing_else():
    registry = ToolRegistry([search_issues, close_issue])
    assert registry.get("search_issues") is registry.get("searchIssues") is not None
    assert registry.get("closeIssue").name == "close_issue"
    for name in ("SearchIssues", "search", "__class__", "get", ""):
        assert registry.get(name) is None


def test_two_tools_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two tools"):
        ToolRegistry([search_issues, tool(close_issue, name="search_issues")])


def test_allowlists_only_narrow():
    registry = ToolRegistry([search_issues, close_issue])
    assert registry.narrowed(None).names() == ["search_issues", "close_issue"]
    session = registry.narrowed(["search_issues", "delete_repo"])  # a profile may name tools this run lacks
    assert session.names() == ["search_issues"]
    with pytest.raises(PermissionError, match="close_issue"):
        session.narrowed(["close_issue"], who="the call's allow_tools")  # a call cannot widen the session's
    assert session.narrowed(["searchIssues"], who="the call").names() == ["search_issues"]
    assert registry.narrowed([]).names() == []


def test_python_stubs_are_a_module_with_signatures_and_docstrings():
    text = python_stubs(ToolRegistry([search_issues, close_issue]).specs())
    module = ast.parse(text)
    functions = {f.name: f for f in module.body if isinstance(f, ast.FunctionDef)}
    assert set(functions) == {"search_issues", "close_issue"}
    search = functions["search_issues"]
    assert [a.arg for a in search.args.kwonlyargs] == ["query", "limit", "state"]
    assert ast.unparse(search.args.kwonlyargs[2].annotation) == "Literal['closed', 'open']"
    assert "words to look for" in ast.get_docstring(search)
    assert ast.unparse(functions["close_issue"].returns) == "None"


def test_typescript_stubs_declare_the_tools_object_in_camel_case():
    text = typescript_stubs(ToolRegistry([search_issues, close_issue]).specs())
    assert "declare const tools: {" in text
    assert ('searchIssues(args: { query: string; limit?: number; state?: "closed" | "open" }): '
            'Promise<Array<{ id: number; title: string }>>;') in text
    assert "closeIssue(args: { issue_id: number }): Promise<null>;" in text
    assert "declare class ToolError extends Error" in text


def test_public_names():
    import wasm_runner.tools

    assert sorted(wasm_runner.tools.__all__) == [
        "ApprovalRefused", "ApprovalRequest", "Approver", "Tool", "ToolPolicy", "ToolRegistry", "ToolRun",
        "as_registry", "camel_name", "from_spec", "marked_for_approval", "needing_approval", "python_stubs", "tool",
        "typescript_stubs",
    ]


def test_a_schema_referring_elsewhere_is_refused_and_nothing_is_fetched(tmp_path):
    """A caller's schema is checked on the host: a `$ref` to a URL must never make the host fetch it."""
    origin = Origin(tmp_path)
    try:
        schema = {"type": "object", "properties": {"a": {"$ref": f"http://127.0.0.1:{origin.port}/a.json"}}}
        with pytest.raises(ValueError, match="not a valid JSON schema"):
            from_spec(ToolSpec(name="f", parameters=schema), lambda a: a)
        assert origin.requests == []
        local = {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
        checker = from_spec(ToolSpec(name="f", parameters=local), lambda a: a).validator()
        assert checker.is_valid({"a": 1}) and not checker.is_valid({"a": "x"})
    finally:
        origin.close()
