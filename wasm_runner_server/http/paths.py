"""Route paths that more than the route's own module needs to know (middlewares, logging, links)."""

from __future__ import annotations

LINK_PREFIX = "/v1/links/"
"""Presigned links: the path carries the credential, so it is never logged whole."""
SESSION_ROUTE_PREFIX = "/v1/sessions/{id}"
BATCH_ROUTE = "/v1/batch"
EXEC_ROUTES = frozenset({"/v1/sessions/{id}/exec", "/v1/sessions/{id}/process", "/v1/exec", BATCH_ROUTE})
