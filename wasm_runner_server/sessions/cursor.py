"""The opaque cursor of a session listing: the (created_at, id) of the last session of a page."""

from __future__ import annotations

import base64
import binascii
import json

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError


def encode_cursor(created_at: float, session_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, session_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, session_id = json.loads(raw)
        if not isinstance(session_id, str) or not isinstance(created_at, (int, float)) or isinstance(created_at, bool):
            raise ValueError
        return float(created_at), session_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ApiError(400, ErrorCode.INVALID_CURSOR, "the cursor is not one this server returned",
                       "pass next_cursor from the previous page unchanged") from None
