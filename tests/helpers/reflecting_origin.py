"""A loopback destination that reflects the Authorization header it gets, as hostile ones do.

GET /reflect?as=FORM answers the header's value in FORM: exact, base64, base64url, base64-nopad,
url (percent-encoded), hex, HEX, gzip (the exact value, gzip-compressed whatever Accept-Encoding
says), reason (in the status line's reason phrase), header (in an X-Echo header) or header-name
(its last word as the name of a header). GET /redirect?to=URL answers 302 to URL. Every request
is recorded as (path, headers by lower-case name).
"""

from __future__ import annotations

import base64
import gzip
import http.server
import threading
from urllib.parse import parse_qs, quote, urlsplit

FORMS = ("exact", "base64", "base64url", "base64-nopad", "url", "hex", "HEX", "gzip", "reason", "header",
         "header-name")


def reflected(form: str, value: str) -> tuple[bytes, dict[str, str], str]:
    """(body, extra headers, reason phrase) that carry `value` in `form`."""
    data = value.encode()
    bodies = {"exact": data, "base64": base64.b64encode(data), "base64url": base64.urlsafe_b64encode(data),
              "base64-nopad": base64.b64encode(data).rstrip(b"="), "url": quote(value, safe="").encode(),
              "hex": data.hex().encode(), "HEX": data.hex().upper().encode(), "gzip": gzip.compress(data)}
    if form in bodies:
        headers = {"Content-Encoding": "gzip"} if form == "gzip" else {}
        return bodies[form], headers, "OK"
    if form == "reason":
        return b"see the reason", {}, f"OK {value}"
    if form == "header-name":
        return b"see the header's name", {f"X-{value.split()[-1]}": "1"}, "OK"
    return b"see the header", {"X-Echo": value}, "OK"


class ReflectingOrigin:
    """A threaded plain-HTTP loopback server; `requests` lists (path, headers) as received."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                origin.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                if url.path == "/redirect":
                    body, headers, reason = b"", {"Location": query["to"][0]}, "Found"
                    status = 302
                else:
                    form = query.get("as", ["exact"])[0]
                    body, headers, reason = reflected(form, self.headers.get("Authorization", ""))
                    status = 200
                self.send_response(status, reason)
                for name, value in {"Content-Length": str(len(body)), "Content-Type": "text/plain", **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, name="reflecting-origin", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
