"""The HTTP surface: request bodies, OpenAPI, streaming, file work, the route tables and the
AccessPolicy interface they ask (the security policy itself is passed in: http never imports it)."""
