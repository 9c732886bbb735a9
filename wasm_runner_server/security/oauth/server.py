"""The OAuth 2.0 authorization server: Authlib's (RFC 6749 authorization code and refresh token grants,
RFC 7636 PKCE, RFC 7009 revocation) over the OAuth store, with a small aiohttp adapter.

Authlib has no aiohttp integration; what it needs from one is here: a request object built from what
the handler has read (`OAuthRequest`), the response it makes (`handle_response`) and its signals (none
are used). Authlib decides; this module only says where things are stored and which rules apply:
- PKCE with S256 only, and required of public apps (they have no secret to prove who they are);
- every token response carries a new refresh token and the used one is spent (rotation); a spent
  refresh token used again revokes its grant, so the whole family (every token descending from the
  authorization) stops working: a leaked token and its legitimate twin cannot both go on;
- revoking a refresh token ends its grant; revoking an access token ends that token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidRequestError,
    OAuth2Payload,
    OAuth2Request,
    TokenMixin,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from multidict import CIMultiDict, MultiMapping

from wasm_runner_server.security.oauth.scopes import SCOPES
from wasm_runner_server.security.oauth.store import (
    ACCESS_PREFIX,
    REFRESH_PREFIX,
    ClientRecord,
    CodeRecord,
    OAuthStore,
    TokenRecord,
)

SECRET_METHODS = ["client_secret_basic", "client_secret_post"]
ALL_METHODS = [*SECRET_METHODS, "none"]
GRANT_TYPES = ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class Member:
    """The person an authorization acts for, and the key they signed in with."""

    workspace: str
    member: str
    key_id: str


class Client(ClientMixin):
    def __init__(self, record: ClientRecord) -> None:
        self.record = record

    def get_client_id(self) -> str:
        return self.record.id

    def get_default_redirect_uri(self) -> str | None:
        uris = self.record.redirect_uris
        return uris[0] if len(uris) == 1 else None  # with several, the request must name one

    def get_allowed_scope(self, scope: str | None) -> str | None:
        """The asked scopes this app may have (all of the app's when none are asked); None: none of them."""
        if not scope:
            return " ".join(self.record.scopes)
        allowed = [s for s in scope.split() if s in self.record.scopes]
        return " ".join(dict.fromkeys(allowed)) or None

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.record.redirect_uris  # exact match, no prefix or pattern

    def check_client_secret(self, client_secret: str) -> bool:
        return self.record.secret_matches(client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "none" if self.record.public else method in SECRET_METHODS

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in GRANT_TYPES


class Code(AuthorizationCodeMixin):
    def __init__(self, record: CodeRecord) -> None:
        self.record = record
        self.code_challenge = record.code_challenge
        self.code_challenge_method = record.code_challenge_method

    def get_redirect_uri(self) -> str | None:
        return self.record.redirect_uri

    def get_scope(self) -> str:
        return self.record.scope


class Token(TokenMixin):
    def __init__(self, record: TokenRecord, refresh: bool) -> None:
        self.record = record
        self.refresh = refresh
        """Whether it was found by its refresh token (else by its access token)."""

    def check_client(self, client: Client) -> bool:
        return self.record.grant.client_id == client.record.id

    def get_scope(self) -> str:
        return self.record.scope

    def get_expires_in(self) -> int:
        return int(self.record.access_expires_at - self.record.issued_at)

    def is_expired(self) -> bool:
        return self.record.access_expires_at <= time.time()

    def is_revoked(self) -> bool:
        return self.record.grant.revoked_at is not None or self.record.access_revoked_at is not None


class _Payload(OAuth2Payload):
    def __init__(self, values: MultiMapping[str]) -> None:
        self._data = {key: values[key] for key in values}  # the first of each, as Authlib's own payloads
        self._datalist: defaultdict[str, list] = defaultdict(list)
        for key, value in values.items():
            self._datalist[key].append(value)

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list]:
        return self._datalist


class OAuthRequest(OAuth2Request):
    """An aiohttp request as Authlib reads it: its query, and the form the handler has already read."""

    def __init__(self, request: web.Request, form: MultiMapping[str] | None = None) -> None:
        super().__init__(request.method, _uri(request), headers=request.headers)
        self._args = request.query
        self._form: Mapping[str, str] = {key: form[key] for key in form} if form is not None else {}
        values: CIMultiDict[str] = CIMultiDict()  # parameters in both count twice (refused as repeated)
        values.extend(request.query)
        if form is not None:
            values.extend(form)
        self.payload = _Payload(values)

    @property
    def args(self) -> MultiMapping[str]:
        return self._args

    @property
    def form(self) -> Mapping[str, str]:
        return self._form


def _uri(request: web.Request) -> str:
    """The request's address as Authlib checks it: https when the client reached the service over TLS
    (directly or through a proxy that ended it), else as seen (plain http passes on loopback only)."""
    url = request.url
    if request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https":
        url = url.with_scheme("https")
    return str(url)


class S256Challenge(CodeChallenge):
    """PKCE with S256 only ('plain' proves nothing against a code seen in transit), required of public apps."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        super().validate_code_challenge(grant, redirect_uri)
        data = grant.request.payload.data
        if data.get("code_challenge") and data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("send code_challenge_method=S256 with code_challenge")
        if grant.request.client.record.public and not data.get("code_challenge"):
            raise InvalidRequestError("a public app must send a PKCE code_challenge (code_challenge_method=S256)")


class CodeGrant(AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ALL_METHODS

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        server: OAuthServer = self.server
        user: Member = request.user
        data = request.payload.data
        server.store.save_code(code, client_id=request.client.record.id, workspace=user.workspace,
                               member=user.member, key_id=user.key_id, redirect_uri=data.get("redirect_uri"),
                               scope=request.scope or "", code_challenge=data.get("code_challenge"),
                               code_challenge_method=data.get("code_challenge_method"),
                               lifetime_s=server.code_s)

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        record = self.server.store.take_code(code, client.record.id)
        return Code(record) if record is not None else None

    def delete_authorization_code(self, authorization_code: Code) -> None:
        return None  # used up when it was taken (take_code): a code is good once, even for a failed exchange

    def authenticate_user(self, authorization_code: Code) -> Member:
        record = authorization_code.record
        return Member(record.workspace, record.member, record.key_id)


class RefreshGrant(RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ALL_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each use answers a new refresh token

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        store: OAuthStore = self.server.store
        record = store.by_refresh(refresh_token)
        if record is None or record.grant.revoked_at is not None:
            return None
        if record.rotated_at is not None:  # spent already: someone else holds it too
            store.revoke_grant(record.grant.id)
            return None
        if record.refresh_expires_at is not None and record.refresh_expires_at <= time.time():
            return None
        if not self.server.key_active(record.grant.key_id):  # the member's sign-in key was revoked
            return None
        return Token(record, refresh=True)

    def authenticate_user(self, refresh_token: Token) -> Member:
        grant = refresh_token.record.grant
        return Member(grant.workspace, grant.member, grant.key_id)

    def revoke_old_credential(self, refresh_token: Token) -> None:
        store: OAuthStore = self.server.store
        if not store.rotate(refresh_token.record.id):  # another use spent it between our read and now
            store.revoke_grant(refresh_token.record.grant.id)


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = ALL_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> Token | None:
        store: OAuthStore = self.server.store
        if token_string.startswith(ACCESS_PREFIX):
            record = store.by_access(token_string)
            return Token(record, refresh=False) if record is not None else None
        if token_string.startswith(REFRESH_PREFIX):
            record = store.by_refresh(token_string)
            return Token(record, refresh=True) if record is not None else None
        return None

    def revoke_token(self, token: Token, request: OAuth2Request) -> None:
        store: OAuthStore = self.server.store
        if token.refresh:
            store.revoke_grant(token.record.grant.id)  # RFC 7009 2.1: its access tokens go with it
        else:
            store.revoke_access(token.record.id)


class OAuthServer(AuthorizationServer):
    """Authlib's authorization server on the OAuth store; `handle_response` makes aiohttp responses."""

    def __init__(self, store: OAuthStore, *, access_s: float, refresh_s: float, code_s: float,
                 key_active: Callable[[str], bool] = lambda key_id: True) -> None:
        super().__init__(scopes_supported=list(SCOPES))
        self.store = store
        self.key_active = key_active
        """Whether the key a member signed in with to consent still acts (a grant dies with it)."""
        self.access_s = access_s
        self.refresh_s = refresh_s
        self.code_s = code_s
        self._consent_key = secrets.token_bytes(32)
        self.register_token_generator("default", BearerTokenGenerator(
            access_token_generator=lambda **_: ACCESS_PREFIX + secrets.token_urlsafe(32),
            refresh_token_generator=lambda **_: REFRESH_PREFIX + secrets.token_urlsafe(32),
            expires_generator=lambda client, grant_type: int(access_s)))
        self.register_grant(CodeGrant, [S256Challenge(required=True)])
        self.register_grant(RefreshGrant)
        self.register_endpoint(Revocation)

    def query_client(self, client_id: str) -> Client | None:
        record = self.store.client(client_id) if client_id else None
        return Client(record) if record is not None else None

    def save_token(self, token: dict, request: OAuth2Request) -> None:
        if request.refresh_token is not None:  # a refresh: the same grant, a new pair
            grant_id = request.refresh_token.record.grant.id
        else:
            user: Member = request.user
            grant = self.store.create_grant(request.client.record.id, user.workspace, user.member, user.key_id,
                                            token.get("scope", ""))
            self.store.code_made(request.authorization_code.record.code_hash, grant.id)
            grant_id = grant.id
        self.store.save_tokens(grant_id, token["access_token"], token.get("refresh_token"), token.get("scope", ""),
                               self.access_s, self.refresh_s)

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        if not isinstance(request, OAuth2Request):
            raise TypeError("build an OAuthRequest from the aiohttp request first (its body is read asynchronously)")
        return request

    def create_json_request(self, request: Any) -> Any:
        raise NotImplementedError("no endpoint here takes JSON")

    def handle_response(self, status: int, body: Any, headers: Any) -> web.Response:
        text = json.dumps(body) if isinstance(body, dict) else (body or "")
        return web.Response(status=status, text=text, headers=CIMultiDict(headers or []))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def consent_token(self, console_session_id: str) -> str:
        """The consent form's CSRF token: bound to the browser's console session, not the console's own
        token (which is never served again)."""
        return hmac.new(self._consent_key, console_session_id.encode(), hashlib.sha256).hexdigest()
