"""An E2B-compatible API: the `e2b` and `e2b-code-interpreter` SDKs work against the service unchanged.

A gateway, mounted at `[e2b] prefix` when `[e2b] enabled = true` (`app.mount_e2b`): it speaks E2B's
control plane (`/sandboxes`), envd's Connect-RPC Process and Filesystem services and file transfer
(`/sandbox/...`, every sandbox behind one URL: the SDK names it in `E2b-Sandbox-Id`), and the code
interpreter's `/execute`, and does each thing by calling the service's own public API with the
caller's key. A sandbox is a session; tenancy, quotas, rate limits and audit are therefore exactly
those of the API, decided by the same code.

Nothing here imports the rest of the service: `settings` is read by the configuration, `app` builds
the sub-application.
"""
