"""Presigned links: one file of one session, one method, until a time.

    POST /v1/sessions/{id}/files/{path}:presign   {"method": "GET"|"PUT", "expires_in": 600}
      -> {"url": "/v1/links/<expires>.<kid>.<sig>/<id>/<path>", "method", "expires_at"}

The signature is HMAC-SHA256 over method, workspace, session id, path and expiry with
the current secret; `kid` names the secret, so a rotated-out secret keeps verifying for as
long as it stays in `auth.presign_secrets` (the overlap window). The link carries no
query string, so the file handlers it delegates to see exactly a plain GET or PUT.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from pathlib import Path
from urllib.parse import quote

from .errors import ApiError

LINK_PREFIX = "/v1/links/"


def kid_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:8]


def load_secrets(configured: list[str], data_dir: Path) -> list[str]:
    """The configured secrets, else one generated once and kept (0600) in the data directory."""
    if configured:
        return list(configured)
    path = Path(data_dir) / "presign.secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = __import__("os").open(tmp, 0o101 | 0o1000, 0o600)  # O_WRONLY|O_CREAT|O_TRUNC
        with open(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        tmp.replace(path)
    return [path.read_text().strip()]


def _message(method: str, workspace: str, session_id: str, path: str, expires: int) -> bytes:
    return "\n".join((method, workspace, session_id, path, str(expires))).encode("utf-8")


class Signer:
    def __init__(self, secrets_: list[str], clock=time.time) -> None:
        if not secrets_:
            raise ValueError("at least one presign secret is needed")
        self.secrets = {kid_of(s): s.encode() for s in secrets_}
        self.current = kid_of(secrets_[0])
        self.clock = clock

    def sign(self, method: str, workspace: str, session_id: str, path: str, expires_in: float) -> tuple[str, int]:
        expires = math.ceil(self.clock() + expires_in)
        sig = hmac.new(self.secrets[self.current], _message(method, workspace, session_id, path, expires),
                       hashlib.sha256).hexdigest()
        token = f"{expires}.{self.current}.{sig}"
        return f"{LINK_PREFIX}{token}/{session_id}/{quote(path, safe='/')}", expires

    def verify(self, token: str, method: str, workspace: str, session_id: str, path: str) -> None:
        """Raises a 403 ApiError for an expired, altered or unknown link."""
        try:
            expires_text, kid, sig = token.split(".")
            expires = int(expires_text)
        except ValueError:
            raise altered() from None
        secret = self.secrets.get(kid)
        if secret is None:
            raise altered()
        method = "GET" if method == "HEAD" else method
        want = hmac.new(secret, _message(method, workspace, session_id, path, expires), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, sig):
            raise altered()
        if self.clock() >= expires:
            raise ApiError(403, "link_expired", "this link has expired",
                           "request a new link with POST /v1/sessions/{id}/files/{path}:presign")


def altered() -> ApiError:
    return ApiError(403, "link_invalid", "this link is not valid (altered, for another method, or signed with a "
                    "retired secret)", "request a new link with POST /v1/sessions/{id}/files/{path}:presign")
