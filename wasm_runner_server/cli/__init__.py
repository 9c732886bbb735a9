"""The wasm-runner console: serve, keys, audit, and the core's own commands."""
