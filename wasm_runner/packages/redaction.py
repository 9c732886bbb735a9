"""Host paths out of the text a caller sees: an install's errors name the package and the reason.

uv's stderr and an OSError's message name the host's files (the data directory, the package
cache, temporary directories). The operator's log keeps them; what reaches a caller has every
absolute path replaced by `<host path>` (or a label: `<session>`, `<package cache>`). A URL's
path is kept (its `/` follows a host or port).
"""

from __future__ import annotations

import re

HIDDEN = "<host path>"
_PATH_CHARS = r"[^\s'\"`,;:()\[\]{}<>]*"
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.%@~>-])/" + _PATH_CHARS)
_FILE_URL = re.compile(r"file:/" + _PATH_CHARS, re.IGNORECASE)
"""A `/` not following a word character, a colon, a slash or a dot (as in a URL's host, port or
scheme), and what follows it up to a space, a quote or a bracket."""


def sanitized(text: str, *known: str, labels: dict[str, str] | None = None) -> str:
    """`text` with the `known` paths (longest first, with what follows them) hidden, the `labels`' paths
    named by their label (`{session_root: "<session>"}` keeps `<session>/packages`), then any other
    absolute path hidden."""
    for path in sorted((p for p in known if p and p != "/"), key=len, reverse=True):
        text = re.sub(re.escape(path) + _PATH_CHARS, HIDDEN, text)
    for path, label in sorted((labels or {}).items(), key=lambda item: len(item[0]), reverse=True):
        if path and path != "/":
            text = text.replace(path, label)
    return _ABSOLUTE_PATH.sub(HIDDEN, _FILE_URL.sub(HIDDEN, text))
