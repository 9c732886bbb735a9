"""Health, readiness, metrics, profiles and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from wasm_runner_protocol.wire import Health, MountInfo, ProfileInfo, ProfileList, Readiness
from wasm_runner_server.http.bodies import json_response
from wasm_runner_server.http.openapi import build_document, operation
from wasm_runner_server.metrics import CONTENT_TYPE
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()

API_VERSION = "1.0.0"
_OPENAPI = web.AppKey("openapi_document", bytes)


@routes.get("/healthz")
@operation(summary="Liveness: the process serves requests", tag="service", response=Health)
async def healthz(request: web.Request) -> web.Response:
    return json_response(Health())


@routes.get("/readyz")
@operation(summary="Readiness: the runtime is warm and the server is not shutting down (503 otherwise)",
           tag="service", response=Readiness, errors=(503,))
async def readyz(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    checks = dict(service.checks)
    if service.closing:
        checks["server"] = "shutting down"
    ready = service.ready and not service.closing
    return json_response(Readiness(ready=ready, checks=checks), status=200 if ready else 503)


@routes.get("/metrics")
@operation(summary="Prometheus metrics (text exposition format)", tag="service", response="text/plain")
async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return web.Response(body=service.metrics.render().encode(), headers={"Content-Type": CONTENT_TYPE})


@routes.get("/v1/profiles")
@operation(summary="Execution profiles a request may name, and the server's limit maxima", tag="service",
           response=ProfileList)
async def profiles(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    execution = service.execution
    listed = [
        ProfileInfo(name=name, description=p.description, language=p.language, provider=p.provider,
                    limits=execution.limits(p, None), mounts=[MountInfo(guest=m.guest) for m in p.mounts],
                    env_allowlist=list(p.env_allowlist), network=p.network.policy)
        for name, p in sorted(execution.profiles.items())
    ]
    return json_response(ProfileList(default=execution.default_profile, profiles=listed,
                                     max_limits=execution.max_limits.as_limits()))


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    document = request.app.get(_OPENAPI)
    if document is None:
        raise web.HTTPNotFound()
    return web.Response(body=document, content_type="application/json")


async def build_openapi(app: web.Application) -> None:
    """on_startup: render the document once, from the routes as registered."""
    import json

    app[_OPENAPI] = json.dumps(build_document(app, title="wasm-runner", version=API_VERSION)).encode()
