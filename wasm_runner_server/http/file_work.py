"""Blocking file work of one request (glob, grep, edit, patch, archive, one-shot outputs).

It runs on the executor every tenant's file routes share, so each request gets a time budget
(`ServerSettings.file_op_timeout_s`), and a request whose handler is cancelled (aiohttp cancels
it when the client goes away) cancels its budget: the work stops at its next check instead of
holding a worker for nobody.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from wasm_runner.workspace.budget import Budget
from wasm_runner_server.sessions.service import Service

T = TypeVar("T")


def request_budget(service: Service) -> Budget:
    return Budget(service.config.server.file_op_timeout_s)


async def run_file_work(budget: Budget, fn: Callable[..., T], /, *args, **kwargs) -> T:
    """`fn(*args, **kwargs, budget=budget)` on the executor; cancelling the caller cancels the budget."""
    try:
        return await asyncio.to_thread(fn, *args, budget=budget, **kwargs)
    except asyncio.CancelledError:
        budget.cancel()
        raise
