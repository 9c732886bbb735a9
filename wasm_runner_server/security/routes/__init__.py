"""Route tables that exist for security: presigned links, audit, admin, shared/."""
