"""The tools tell a model which tier to use for what, and what the limits are (tool descriptions)."""

from __future__ import annotations

from mcp_connect import Connect


async def test_the_descriptions_name_the_tiers_and_the_limits(connect: Connect) -> None:
    async with connect() as session:
        listed = await session.list_tools()
    tools = {tool.name: tool.description or "" for tool in listed.tools}
    execute = tools["sandbox_execute_code"]
    for words in ("'python-data'", "pandas", "numpy", "matplotlib", "'bash'", "command-line tools",
                  "WebAssembly", "fast pure code"):
        assert words in execute, words
    for limit in ("10 s", "256 MiB memory", "1 MiB of output", "20,000 characters", "head and tail"):
        assert limit in execute, limit
    assert "command-line tools" in tools["run_process"] and "'python-data'" in tools["run_process"]
