"""MCP tools over streamable HTTP (mounted on the service) and stdio."""
