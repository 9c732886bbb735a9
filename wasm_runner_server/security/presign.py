"""Presigned links: one file of one session, one method, until a time, for as long as the key lives.

    POST /v1/sessions/{id}/files/{path}:presign   {"method": "GET"|"PUT", "expires_in": 600}
      -> {"url": "/v1/links/<expires>.<key id>.<kid>.<sig>/<id>/<path>", "method", "expires_at"}

The signature is HMAC-SHA256 over method, workspace, session id, the session's incarnation
(its creation time: a session deleted and created again under the same id does not honour
the old links), path, expiry and the id of the key that asked for the link (the link dies
with the key's revocation, and its use counts against that key's rate limit). `kid` names the
secret, so a rotated-out secret keeps verifying for as long as it stays in
`auth.presign_secrets` (the overlap window). A token has exactly one spelling (no leading
zeros, signs or other case), and the link carries no query string, so the file handlers it
delegates to see exactly a plain GET or PUT.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
import secrets
import time
from pathlib import Path
from urllib.parse import quote

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.paths import LINK_PREFIX


def kid_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:8]


SECRET_NAME = "presign"
"""The generated secret's name (the file `presign.secret` in a data directory, a row in a cluster's database)."""


def new_secret() -> str:
    return secrets.token_urlsafe(48)


def load_secrets(configured: list[str], data_dir: Path) -> list[str]:
    """The configured secrets, else one generated once and kept (0600) in the data directory."""
    if configured:
        return list(configured)
    path = Path(data_dir) / f"{SECRET_NAME}.secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w") as handle:
            handle.write(new_secret())
        tmp.replace(path)
    return [path.read_text().strip()]


TOKEN = re.compile(r"(?P<expires>[1-9][0-9]{0,15})\.(?P<key_id>[0-9a-f]{12}|local)\.(?P<kid>[0-9a-f]{8})"
                   r"\.(?P<sig>[0-9a-f]{64})")
"""The one spelling of a token (full match): what `sign` writes, nothing else."""


def _message(method: str, workspace: str, session_id: str, incarnation: str, path: str, expires: int,
             key_id: str) -> bytes:
    return "\n".join((method, workspace, session_id, incarnation, path, str(expires), key_id)).encode("utf-8")


class Signer:
    def __init__(self, secrets_: list[str], clock=time.time) -> None:
        if not secrets_:
            raise ValueError("at least one presign secret is needed")
        self.secrets = {kid_of(s): s.encode() for s in secrets_}
        self.current = kid_of(secrets_[0])
        self.clock = clock

    def sign(self, method: str, workspace: str, session_id: str, path: str, expires_in: float, *,
             incarnation: str, key_id: str) -> tuple[str, int]:
        token, expires = self.token(method, workspace, session_id, path, expires_in, incarnation=incarnation,
                                    key_id=key_id)
        return f"{LINK_PREFIX}{token}/{session_id}/{quote(path, safe='/')}", expires

    def token(self, method: str, workspace: str, subject: str, path: str, expires_in: float, *,
              incarnation: str, key_id: str) -> tuple[str, int]:
        """The signed token alone (and its expiry), for a link whose path names `subject` its own way."""
        expires = math.ceil(self.clock() + expires_in)
        message = _message(method, workspace, subject, incarnation, path, expires, key_id)
        sig = hmac.new(self.secrets[self.current], message, hashlib.sha256).hexdigest()
        token = f"{expires}.{key_id}.{self.current}.{sig}"
        if TOKEN.fullmatch(token) is None:
            raise ValueError(f"cannot sign a link for key id {key_id!r}")
        return token, expires

    def verify(self, token: str, method: str, workspace: str, session_id: str, path: str, *,
               incarnation: str) -> str:
        """The id of the key the link was made with; a 403 ApiError for an expired, altered, unknown or
        non-canonical link, or one of another incarnation of the session."""
        parts = TOKEN.fullmatch(token)
        if parts is None:
            raise altered()
        secret = self.secrets.get(parts["kid"])
        if secret is None:
            raise altered()
        expires, key_id = int(parts["expires"]), parts["key_id"]
        method = "GET" if method == "HEAD" else method
        want = hmac.new(secret, _message(method, workspace, session_id, incarnation, path, expires, key_id),
                        hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, parts["sig"]):
            raise altered()
        if self.clock() >= expires:
            raise ApiError(403, ErrorCode.LINK_EXPIRED, "this link has expired",
                           "request a new link with POST /v1/sessions/{id}/files/{path}:presign")
        return key_id


def altered() -> ApiError:
    return ApiError(403, ErrorCode.LINK_INVALID, "this link is not valid (altered, for another method, for a session "
                    "deleted since, or signed with a retired secret)",
                    "request a new link with POST /v1/sessions/{id}/files/{path}:presign")


def key_revoked() -> ApiError:
    return ApiError(403, ErrorCode.LINK_REVOKED, "the key this link was made with has been revoked",
                    "request a new link, with a valid key, with POST /v1/sessions/{id}/files/{path}:presign")
