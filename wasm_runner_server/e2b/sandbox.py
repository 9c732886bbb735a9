"""What every call to a sandbox (envd, the code interpreter) starts from: which sandbox, as whom."""

from __future__ import annotations

from aiohttp import web

from wasm_runner_server.e2b.connect_rpc import RpcError
from wasm_runner_server.e2b.upstream import Upstream


class SandboxCall:
    """The sandbox a request names (`E2b-Sandbox-Id`, as the SDK sends it to one shared sandbox URL) and
    the API as the caller: the envd access token the control plane handed out is the caller's own key."""

    def __init__(self, request: web.Request) -> None:
        sandbox_id = request.headers.get("E2b-Sandbox-Id", "")
        if not sandbox_id:
            raise RpcError("invalid_argument", "no E2b-Sandbox-Id header: point E2B_SANDBOX_URL at "
                                               "<service>/e2b/sandbox (the SDK then names the sandbox in it)")
        self.sandbox_id = sandbox_id
        self.upstream = Upstream(request, request.headers.get("X-Access-Token") or None)
