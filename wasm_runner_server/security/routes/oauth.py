"""OAuth 2.0 for apps acting for members: the authorization page, the token and revocation endpoints
(Authlib's, through security.oauth.server), the admin's app registrations and the member's grants.

The /oauth/ endpoints are served without a key (the security middleware lets OAUTH_PREFIX through):
the authorization page needs the member's console sign-in (its cookie), the token and revocation
endpoints the app's own credentials, which Authlib checks. A member approves on a consent page posted
back with a token bound to their console session; the scopes they give an app are kept, and a later
request asking for no more than those is answered at once, without the page (`prompt=consent` shows it
anyway). Refusing answers the app `error=access_denied`.
"""

from __future__ import annotations

import hmac
import html
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
from aiohttp import web
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import InsecureTransportError
from msgspec import Meta
from multidict import MultiDict

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import CONSOLE_PREFIX
from wasm_runner_server.http.policy import Principal, principal_of
from wasm_runner_server.security.access import grant_of
from wasm_runner_server.security.console_sessions import OAUTH_COOKIE, check_same_origin, cookie_session
from wasm_runner_server.security.oauth.scopes import SCOPES
from wasm_runner_server.security.oauth.server import Member, OAuthRequest, OAuthServer
from wasm_runner_server.security.oauth.store import ClientRecord, GrantRecord
from wasm_runner_server.security.state import SECURITY, Security
from wasm_runner_server.security.tenants import WORKSPACE_PATTERN

routes = web.RouteTableDef()
OAUTH_PREFIX = "/oauth/"
AUTHORIZE_PATH = "/oauth/authorize"
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Frame-Options": "DENY",  # no other site frames the page to have a member click "Allow"
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
Scope = Literal["sessions:read", "sessions:write", "exec", "files:read", "files:write", "processes"]
SCOPE_NAMES: tuple[str, ...] = Scope.__args__  # type: ignore[attr-defined]
assert set(SCOPE_NAMES) == set(SCOPES), "the wire type lists exactly the scopes"


# -- the authorization page --------------------------------------------------------------------------


def _page(title: str, body: str, status: int = 200) -> web.Response:
    document = (f"<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content='width=device-width'>"
                f"<title>{html.escape(title)}</title><style>body{{font:16px system-ui;max-width:34rem;margin:3rem auto;"
                f"padding:0 1rem}}li{{margin:.3rem 0}}button{{font:inherit;padding:.4rem 1rem;margin-right:.5rem}}"
                f"</style><h1>{html.escape(title)}</h1>{body}</html>")
    return web.Response(text=document, status=status, content_type="text/html", headers=PAGE_HEADERS)


def _signed_in(request: web.Request, security: Security) -> tuple[str, Principal] | None:
    """The browser's console session (id, principal) when it is live and its key still active."""
    session = cookie_session(request, security.console, OAUTH_COOKIE)
    if session is None or not security.authenticator.key_active(session.principal.key_id):
        return None
    return request.cookies[OAUTH_COOKIE], session.principal


def _not_signed_in() -> web.Response:
    return _page("Sign in first", f"<p>An app asks to act for you. Sign in to the <a href='{CONSOLE_PREFIX}/'>"
                 "console</a> with your member key, then come back to this page (reload it).</p>", 401)


def _member(principal: Principal) -> Member | None:
    if principal.member is None or principal.scopes is not None:
        return None
    return Member(principal.workspace, principal.member, principal.key_id)


def _oauth_request(request: web.Request, form: MultiDict[str] | None = None) -> OAuthRequest:
    try:
        return OAuthRequest(request, form)
    except InsecureTransportError:
        raise ApiError(400, ErrorCode.MALFORMED_REQUEST, "OAuth is served over https only (plain http on loopback)",
                       "reach the service over https; behind a proxy that ends TLS, have it send "
                       "X-Forwarded-Proto: https") from None


def _error(server: OAuthServer, oauth_request: OAuthRequest, error: OAuth2Error) -> web.Response:
    """Authlib's answer to a bad request: back to the app when its redirect URI is known and valid, else a page
    (never a redirect to an address the app did not register)."""
    if error.redirect_uri:
        return server.handle_error_response(oauth_request, error)
    return _page("This app's request is not valid",
                 f"<p>{html.escape(error.error)}: {html.escape(error.description or '')}</p>", 400)


@routes.get(AUTHORIZE_PATH)
@operation(summary="OAuth authorization: the consent page a signed-in member approves or denies (or, within "
                   "scopes already given, a redirect with a code at once)", tag="oauth", response="text/html",
           also=(302,), errors=(400, 401, 403))
async def authorize_page(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    server = security.oauth_server
    signed_in = _signed_in(request, security)
    if signed_in is None:
        return _not_signed_in()
    session_id, principal = signed_in
    member = _member(principal)
    if member is None:
        return _page("A member must sign in", "<p>Apps act for a person: sign in to the console with a member key "
                     "that names its member (<code>wasm-runner keys create --member NAME</code>).</p>", 403)
    oauth_request = _oauth_request(request)
    try:
        grant = server.get_consent_grant(oauth_request, end_user=member)
    except OAuth2Error as error:
        return _error(server, oauth_request, error)
    client: ClientRecord = grant.client.record
    if client.workspace != member.workspace:  # an app serves its own workspace's members only
        return _page("This app is not available", "<p>The app belongs to another workspace.</p>", 403)
    scopes = (oauth_request.scope or "").split()
    given = security.oauth.consent(member.workspace, member.member, client.id)
    if request.query.get("prompt") != "consent" and scopes and set(scopes) <= given:
        return server.create_authorization_response(oauth_request, grant_user=member, grant=grant)
    items = "".join(f"<li><b>{html.escape(s)}</b>: {html.escape(SCOPES[s])}</li>" for s in scopes)
    action = html.escape(request.path_qs, quote=True)
    token = server.consent_token(session_id)
    redirect = html.escape(urlsplit(oauth_request.payload.redirect_uri or client.redirect_uris[0]).netloc)
    body = (f"<p><b>{html.escape(client.name)}</b> (at {redirect}) asks to act for you, "
            f"<b>{html.escape(member.member)}</b>, in the workspace <b>{html.escape(member.workspace)}</b>:</p>"
            f"<ul>{items}</ul><form method=post action=\"{action}\">"
            f"<input type=hidden name=csrf_token value=\"{token}\">"
            "<button name=decision value=approve>Allow</button><button name=decision value=deny>Deny</button>"
            "</form><p>You can withdraw it later (GET /v1/oauth/grants, DELETE /v1/oauth/grants/{id}).</p>")
    return _page(f"Allow {client.name}?", body)


@routes.post(AUTHORIZE_PATH)
@operation(summary="OAuth authorization: the member's decision (the consent page's form); redirects to the app "
                   "with a code, or with error=access_denied", tag="oauth", status=302, errors=(400, 401, 403))
async def authorize_decision(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    server = security.oauth_server
    check_same_origin(request)
    signed_in = _signed_in(request, security)
    if signed_in is None:
        return _not_signed_in()
    session_id, principal = signed_in
    member = _member(principal)
    if member is None:
        return _page("A member must sign in", "<p>Sign in with a member key that names its member.</p>", 403)
    form = await _form(request)
    sent = form.get("csrf_token")
    if not isinstance(sent, str) or not hmac.compare_digest(sent, server.consent_token(session_id)):
        return _page("Refused", "<p>This decision did not come from the consent page: open the app's link "
                     "again.</p>", 403)
    oauth_request = _oauth_request(request)  # the parameters are the query's (the page posts to its own address)
    try:
        grant = server.get_consent_grant(oauth_request, end_user=member)
    except OAuth2Error as error:
        return _error(server, oauth_request, error)
    client: ClientRecord = grant.client.record
    if client.workspace != member.workspace:
        return _page("This app is not available", "<p>The app belongs to another workspace.</p>", 403)
    approved = form.get("decision") == "approve"
    if approved:
        security.oauth.record_consent(member.workspace, member.member, client.id,
                                      frozenset((oauth_request.scope or "").split()))
    return server.create_authorization_response(oauth_request, grant_user=member if approved else None, grant=grant)


# -- the app's endpoints (Authlib) ---------------------------------------------------------------------


class TokenResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    """RFC 6749 5.1 (Authlib's answer)."""

    token_type: str
    access_token: str
    refresh_token: str | None = None
    expires_in: int | None = None
    scope: str | None = None


class Revoked(msgspec.Struct, kw_only=True):
    """RFC 7009 2.2: an empty object, for a token revoked and for one that was not valid."""


class OAuthErrorBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """RFC 6749 5.2's error (`error` a string such as invalid_grant), or the service's own error shape
    (`error` an object) for what is refused before OAuth is reached (plain http off loopback)."""

    error: str | dict[str, Any]
    error_description: str | None = None
    error_uri: str | None = None
    state: str | None = None


async def _form(request: web.Request) -> MultiDict[str]:
    """The form's text fields (an uploaded file is no OAuth parameter)."""
    return MultiDict((key, value) for key, value in (await request.post()).items() if isinstance(value, str))


@routes.post("/oauth/token")
@operation(summary="OAuth token endpoint (form-encoded): grant_type=authorization_code (with the PKCE "
                   "code_verifier) or refresh_token (each use answers a new refresh token)", tag="oauth",
           body="application/x-www-form-urlencoded", response=TokenResponse, errors=(400, 401),
           error_body=OAuthErrorBody)
async def token(request: web.Request) -> web.StreamResponse:
    return request.app[SECURITY].oauth_server.create_token_response(_oauth_request(request, await _form(request)))


@routes.post("/oauth/revoke")
@operation(summary="OAuth token revocation (RFC 7009): a refresh token ends its whole grant, an access token "
                   "itself", tag="oauth", body="application/x-www-form-urlencoded", response=Revoked,
           errors=(400, 401), error_body=OAuthErrorBody)
async def revoke(request: web.Request) -> web.StreamResponse:
    oauth_request = _oauth_request(request, await _form(request))
    return request.app[SECURITY].oauth_server.create_endpoint_response("revocation", oauth_request)


# -- apps, registered by an admin ----------------------------------------------------------------------

RedirectUri = Annotated[str, Meta(min_length=1, max_length=2048)]


class ClientCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=128)]
    redirect_uris: Annotated[list[RedirectUri], Meta(min_length=1, max_length=16)]
    """Where the member's browser returns with the code: exact addresses, https (http on loopback only)."""
    scopes: Annotated[list[Scope], Meta(min_length=1)]
    """The scopes the app may ask for (the member approves some or all of them)."""
    public: bool = False
    """A public app (a browser or native app) has no secret and must use PKCE; a confidential one gets a secret."""
    workspace: Annotated[str, Meta(pattern=WORKSPACE_PATTERN)] | None = None
    """Whose members the app serves (default: the admin key's own workspace)."""


class ClientInfo(msgspec.Struct, kw_only=True):
    client_id: str
    workspace: str
    name: str
    redirect_uris: list[str]
    scopes: list[str]
    public: bool
    created_at: datetime


class NewClient(ClientInfo, kw_only=True):
    client_secret: str | None = None
    """Shown only now (None for a public app); only its hash is stored: a lost one means a new app."""


class ClientList(msgspec.Struct, kw_only=True):
    clients: list[ClientInfo]


class ClientListQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: Annotated[str, Meta(pattern=WORKSPACE_PATTERN)] | None = None


def client_info(record: ClientRecord) -> dict:
    return dict(client_id=record.id, workspace=record.workspace, name=record.name,
                redirect_uris=list(record.redirect_uris), scopes=list(record.scopes), public=record.public,
                created_at=datetime.fromtimestamp(record.created_at, tz=UTC))


@routes.post("/v1/admin/oauth/clients")
@operation(summary="Register an OAuth app; a confidential app's secret is in this response only",
           tag="admin", body=ClientCreate, response=NewClient, status=201, errors=(403, 422), permission="apps.manage")
async def create_client(request: web.Request) -> web.Response:
    access = grant_of(request).access
    principal = access.principal
    body = await read_json(request, ClientCreate)
    workspace = access.scope(body.workspace)
    try:
        secret, record = request.app[SECURITY].oauth.create_client(
            workspace, body.name, body.redirect_uris, list(body.scopes), body.public, principal.key_id)
    except ValueError as exc:  # what the schema cannot say: a redirect URI that is not https or loopback
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc), "register the app's exact callback address") from None
    request.app[SECURITY].tenants.ensure_workspace(workspace)
    return json_response(NewClient(client_secret=secret, **client_info(record)), status=201)


@routes.get("/v1/admin/oauth/clients")
@operation(summary="List OAuth apps (never their secrets)", tag="admin", query=ClientListQuery,
           response=ClientList, errors=(403,), permission="apps.read")
async def list_clients(request: web.Request) -> web.Response:
    access = grant_of(request).access
    query = read_query(request, ClientListQuery)
    workspace = access.scope(query.workspace) if (query.workspace or not access.operator) else None
    records = request.app[SECURITY].oauth.clients(workspace)
    return json_response(ClientList(clients=[ClientInfo(**client_info(r)) for r in records]))


@routes.delete("/v1/admin/oauth/clients/{client}")
@operation(summary="Delete an OAuth app: every grant and token it holds ends at once", tag="admin",
           response=ClientInfo, errors=(403, 404), permission="apps.manage")
async def delete_client(request: web.Request) -> web.Response:
    access = grant_of(request).access
    workspace = None if access.operator else access.principal.workspace  # another workspace's app: not found
    record = request.app[SECURITY].oauth.delete_client(request.match_info["client"], workspace)
    if record is None:
        raise not_found(ErrorCode.OAUTH_CLIENT_NOT_FOUND, request.match_info["client"],
                        "GET /v1/admin/oauth/clients lists the apps")
    return json_response(ClientInfo(**client_info(record)))


# -- a member's grants ---------------------------------------------------------------------------------


class GrantInfo(msgspec.Struct, kw_only=True):
    id: str
    client_id: str
    app: str
    scopes: list[str]
    created_at: datetime


class GrantList(msgspec.Struct, kw_only=True):
    grants: list[GrantInfo]


def _the_member(request: web.Request) -> Principal:
    principal = principal_of(request)
    if principal.member is None:
        raise ApiError(403, ErrorCode.ADMIN_ONLY, "grants are a member's: this key acts for no member",
                       "use a member key made with --member NAME")
    return principal


def _grant_info(grant: GrantRecord, names: dict[str, str]) -> GrantInfo:
    return GrantInfo(id=grant.id, client_id=grant.client_id, app=names.get(grant.client_id, ""),
                     scopes=grant.scope.split(), created_at=datetime.fromtimestamp(grant.created_at, tz=UTC))


@routes.get("/v1/oauth/grants")
@operation(summary="The apps the calling member has authorized (their live grants)", tag="oauth",
           response=GrantList, errors=(403,))
async def list_grants(request: web.Request) -> web.Response:
    principal = _the_member(request)
    store = request.app[SECURITY].oauth
    names = {c.id: c.name for c in store.clients(principal.workspace)}
    grants = store.grants(principal.workspace, principal.member or "")
    return json_response(GrantList(grants=[_grant_info(g, names) for g in grants]))


@routes.delete("/v1/oauth/grants/{grant}")
@operation(summary="Revoke one of the calling member's grants: its tokens stop at once, and the app must ask "
                   "for consent again", tag="oauth", response=GrantInfo, errors=(403, 404))
async def revoke_grant(request: web.Request) -> web.Response:
    principal = _the_member(request)
    store = request.app[SECURITY].oauth
    grant = store.grant(request.match_info["grant"])
    if grant is None or grant.revoked_at is not None or (grant.workspace, grant.member) != (
            principal.workspace, principal.member):
        raise not_found(ErrorCode.GRANT_NOT_FOUND, request.match_info["grant"], "GET /v1/oauth/grants lists yours")
    store.revoke_grant(grant.id)
    store.forget_consent(grant.workspace, grant.member, grant.client_id)
    names = {c.id: c.name for c in store.clients(principal.workspace)}
    return json_response(_grant_info(grant, names))
