"""A local MCP server on the official SDK (stdio) with one tool doing nothing, for bench_tools.py."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("noop", log_level="CRITICAL")


@server.tool()
def noop(n: int) -> int:
    """Does nothing: the call's own cost is all there is."""
    return n


if __name__ == "__main__":
    server.run("stdio")
