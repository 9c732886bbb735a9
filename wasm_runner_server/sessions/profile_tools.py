"""The tools a profile's runs get from its configured MCP servers, started on first use and kept
until the service closes (a server that cannot start is retried on the next use)."""

from __future__ import annotations

import asyncio
import logging

from wasm_runner.profiles import Profile
from wasm_runner.tools import Tool, marked_for_approval
from wasm_runner.tools.mcp_source import McpTools

__all__ = ["ProfileTools", "with_approvals"]

log = logging.getLogger("wasm_runner.server")


class ProfileTools:
    def __init__(self) -> None:
        self._sources: dict[str, list[McpTools]] = {}
        self._lock = asyncio.Lock()

    async def tools(self, name: str, profile: Profile) -> list[Tool]:
        """The tools of the profile's MCP servers, those its `approval_tools` names marked as needing approval
        (RuntimeError naming a server that cannot be reached)."""
        if not profile.mcp_servers:
            return []
        async with self._lock:
            sources = self._sources.get(name)
            if sources is None:
                sources = []
                try:
                    for server in profile.mcp_servers:
                        source = server.source()
                        sources.append(source)
                        await asyncio.to_thread(source.start)
                except Exception:
                    await asyncio.to_thread(_close_all, sources)
                    raise
                self._sources[name] = sources
                log.info("MCP tool sources started", extra={"event": "mcp_tools", "profile": name,
                                                            "tools": sum(len(s.tools) for s in sources)})
        return with_approvals([tool for source in sources for tool in source.tools], profile)

    async def close(self) -> None:
        sources = [s for listed in self._sources.values() for s in listed]
        self._sources.clear()
        await asyncio.to_thread(_close_all, sources)


def with_approvals(tools: list[Tool], profile: Profile) -> list[Tool]:
    """The tools, those the profile's `approval_tools` names marked as needing approval."""
    return marked_for_approval(tools, profile.approval_tools)


def _close_all(sources: list[McpTools]) -> None:
    for source in sources:
        source.close()
