"""A small MCP server on the official SDK (stdio): an issue tracker whose API token lives in its
environment (`TRACKER_TOKEN`), as an operator's MCP server would hold a credential."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("issues", log_level="CRITICAL")
ISSUES = {1: "crash on start", 2: "slow search", 3: "crash on exit"}


@server.tool()
def search_issues(query: str, limit: int = 10) -> list[int]:
    """Numbers of the issues whose title holds the query."""
    if not os.environ.get("TRACKER_TOKEN"):
        raise RuntimeError("no token")
    return [n for n, title in ISSUES.items() if query in title][:limit]


@server.tool(name="issueTitle")
def issue_title(number: int) -> str:
    """The title of an issue."""
    if number not in ISSUES:
        raise ToolError(f"no issue #{number}")
    return ISSUES[number]


@server.tool()
def whoami() -> str:
    """Proves the server holds its token, without ever returning it."""
    return f"token of {len(os.environ['TRACKER_TOKEN'])} characters"


if __name__ == "__main__":
    server.run("stdio")
