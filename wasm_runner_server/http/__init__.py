"""The HTTP surface: request bodies and errors, OpenAPI, streaming, file work and the route tables (no security here: it is passed in)."""
