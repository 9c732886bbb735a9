"""Route paths that more than the route's own module needs to know (middlewares, logging, links)."""

from __future__ import annotations

LINK_PREFIX = "/v1/links/"
"""Presigned links: the path carries the credential, so it is never logged whole."""
SESSION_ROUTE_PREFIX = "/v1/sessions/{id}"
BATCH_ROUTE = "/v1/batch"
EXEC_ROUTES = frozenset({"/v1/sessions/{id}/exec", "/v1/sessions/{id}/process", "/v1/exec", BATCH_ROUTE})
ARTIFACT_LINK_PREFIX = "/v1/artifact-links/"
"""Presigned artifact downloads: like LINK_PREFIX, a credential in the path."""
CONSOLE_PREFIX = "/console"
"""The web console's page and assets: public (it holds no data; it signs in with a key)."""
CONSOLE_SESSION_PATH = "/v1/console/session"
CONSOLE_LINKS_PATH = "/v1/console/sign-in-links"
"""The console's sign-in (POST a key), its state (GET) and sign-out (DELETE): served without a key."""
CONSOLE_COOKIE = "wr_console"
"""The console's session cookie: never passed on to a session's own server (see routes/ports.py)."""
CONSOLE_OAUTH_COOKIE = CONSOLE_COOKIE + "_oauth"
"""The same console session for the OAuth authorization page (path /oauth/): guarded like CONSOLE_COOKIE."""
ANY_PATH = r"{path:[\s\S]*}"
"""A workspace path in a route: any character, a newline too (`.*` stops at one, and a file named with a
newline could be listed but never read, replaced or deleted). The path is validated by its handler."""
PREVIEW_LINK_PREFIX = "/v1/preview-links/"
"""Where preview links were before previews got origins of their own: answered 410 (a credential
in the path then, so still never logged whole)."""
PTY_LINK_PREFIX = "/v1/pty-links/"
"""Presigned terminal links (a browser's WebSocket cannot carry the key): a credential in the path."""
SESSION_SCOPED = (SESSION_ROUTE_PREFIX, LINK_PREFIX + "{token}/{id}", PTY_LINK_PREFIX + "{token}/{id}")
"""Route prefixes whose `{id}` is the session a request acts on: in a cluster, served by the node that
holds that session (forwarded there, or taken over here), a presigned link as much as a keyed call."""
