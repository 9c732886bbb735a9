"""A small dev server run *inside* a native sandbox by the preview-port tests (stdlib only).

    python3 sandbox_devserver.py PORT

GET /chunked streams three chunks (Transfer-Encoding: chunked); POST /echo answers its body;
GET /redirect answers 302 to /chunked; GET /ws upgrades to a WebSocket that echoes each text or
binary frame; HTTP/1.1 with keep-alive. GET /wide-headers answers `Service-Worker-Allowed: /`
and a Set-Cookie for each |-separated value of its X-Cookies header; any other GET answers its
path, Authorization and Cookie headers. GET /connections answers how many connections it has
accepted; GET /hold sends a first chunk, then the last one only once GET /release came (or
after 10 s); GET /cut announces 100 bytes, sends 10 and closes the connection.
"""

import base64
import hashlib
import http.server
import socketserver
import struct
import sys
import threading
import time

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONNECTIONS = [0]
RELEASED = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1
    """Answers go out whole (flushed at their end or by the handler): written in two parts, a body
    would wait behind its headers for the client's delayed ACK (Nagle), about 40 ms on every
    keep-alive request, whoever the client is."""

    def log_message(self, *args):
        pass

    def setup(self):
        CONNECTIONS[0] += 1
        super().setup()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        if self.path in ("/chunked", "/hold"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.path == "/hold":
                self.chunk(b"first ")
                RELEASED.wait(10)
                self.chunk(b"last")
            else:
                for part in (b"one ", b"two ", b"three"):
                    self.chunk(part)
                    time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/cut":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/release":
            RELEASED.set()
        if self.path == "/connections":
            body = str(CONNECTIONS[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/chunked")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/wide-headers":
            self.send_response(200)
            self.send_header("Service-Worker-Allowed", "/")
            for cookie in self.headers.get("X-Cookies", "").split("|"):
                self.send_header("Set-Cookie", cookie)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = (f"hello from the sandbox; auth={self.headers.get('Authorization')}; path={self.path}; "
                f"cookie={self.headers.get('Cookie')}").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                return
            if opcode in (1, 2):
                out = payload if opcode == 2 else b"echo: " + payload
                header = bytes([0x80 | opcode])
                if len(out) < 126:
                    header += bytes([len(out)])
                else:
                    header += bytes([126]) + struct.pack(">H", len(out))
                self.wfile.write(header + out)
                self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()
