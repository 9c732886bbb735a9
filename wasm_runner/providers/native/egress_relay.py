"""The relay inside a native sandbox: 127.0.0.1:PORT there, the host's egress proxy socket behind it.

Run by the system's python3 inside the sandbox, before the program (never imported by the host):

    python3 -I -S egress_relay.py PORT SOCKET -- PROGRAM ARGS...

It listens first, so the program never races it, then forks twice (the relay ends up a child
of the sandbox's init, out of the program's process tree, and dies with the sandbox) and execs
the program. Each TCP connection becomes one connection to the run's Unix socket; all policy
lives on the host's side of that socket.
"""

import os
import socket
import sys
import threading

CHUNK = 65536


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def handle(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=handle, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> None:
    port, path, separator, program = int(argv[1]), argv[2], argv[3], argv[4:]
    if separator != "--" or not program:
        sys.exit("usage: egress_relay.py PORT SOCKET -- PROGRAM ARGS...")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    child = os.fork()
    if child == 0:
        if os.fork() != 0:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            serve(listener, path)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"bwrap: execvp {program[0]}: {exc.strerror}\n")
        os._exit(1)  # as bwrap itself does, so the run reads as CommandNotFound


if __name__ == "__main__":
    main(sys.argv)
