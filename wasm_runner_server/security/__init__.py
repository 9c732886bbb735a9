"""Keys, tenants, quotas, presigned links, rate limits and the audit log, with their routes."""
