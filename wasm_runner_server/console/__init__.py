"""The web console at /console: a static page (our own small modules plus pinned npm files under
vendor/, listed with their sha256 in vendor/vendor.lock) that signs in with an API key and calls the API."""
