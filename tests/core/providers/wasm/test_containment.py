"""The guest sees its workspace and nothing else of the host."""

import os
import socket
import threading

import pytest


@pytest.fixture
def session(runner):
    s = runner.session()
    s.workspace.ensure()
    yield s
    s.destroy()


def test_workspace_is_the_working_directory_and_relative_paths_work(session):
    result = session.run_sync("import os\nopen('a.txt', 'w').write('hi')\nos.getcwd()", fresh=True)
    assert result.value == "'/workspace'"
    assert (session.path / "a.txt").read_text() == "hi"
    assert result.files.created == ["a.txt"]


def test_root_lists_only_the_preopened_directories(session):
    result = session.run_sync("import os\nsorted(os.listdir('/'))", fresh=True)
    assert result.value in ("['tmp', 'workspace']", "[]") or "Errno" in result.stderr


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../../../../etc/passwd", "/workspace/../../etc/passwd", "/proc/self/environ", "/root"],
)
def test_host_paths_are_unreachable(session, path):
    result = session.run_sync(f"open({path!r}).read()", fresh=True)
    assert result.error is not None
    assert result.error.type in ("FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError")
    assert "root:" not in result.stdout + result.stderr


def test_symlinks_placed_in_the_workspace_do_not_lead_outside(session, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(secret, session.path / "abs-link")
    os.symlink(os.path.relpath(secret, session.path), session.path / "rel-link")
    for name in ("abs-link", "rel-link"):
        result = session.run_sync(f"open({name!r}).read()", fresh=True)
        assert result.error is not None, name
        assert "host secret" not in result.stdout + (result.value or "")


def test_a_symlink_made_by_the_guest_is_never_followed_by_the_host(session, tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("x" * 1000)
    result = session.run_sync(f"import os\nos.symlink({str(target)!r}, 'link')\n'made'", fresh=True)
    if result.value == "'made'":
        # The host's change tracking lists the link itself, without following it.
        assert result.files.created == ["link"]
        assert os.path.islink(session.path / "link")
    follow = session.run_sync("open('link').read()", fresh=True)
    assert follow.error is not None
    assert target.read_text() == "x" * 1000


def test_guest_cannot_hard_link_a_host_file(session):
    result = session.run_sync("import os\nos.link('/etc/passwd', 'pw')", fresh=True)
    assert result.error is not None
    assert not (session.path / "pw").exists()


def test_network_is_denied_even_to_loopback(session):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(2)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    result = session.run_sync(f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))", fresh=True)
    thread.join()
    server.close()
    assert result.error is not None and result.error.type == "PermissionError"
    assert accepted == []
    lookup = session.run_sync("import socket\nsocket.getaddrinfo('example.com', 443)", fresh=True)
    assert lookup.error is not None


def test_read_only_mount_is_readable_not_writable(tmp_path):
    from wasm_runner import Mount, Runner

    data = tmp_path / "data"
    data.mkdir()
    (data / "ref.txt").write_text("reference")
    with Runner(tmp_path / "r", isolation="in-process", mounts=(Mount(data, "/data"),)) as runner:
        read = runner.run_sync("open('/data/ref.txt').read()")
        assert read.value == "'reference'"
        write = runner.run_sync("open('/data/new.txt', 'w').write('x')")
        assert write.error is not None
        assert not (data / "new.txt").exists()


def test_tmp_is_private_to_the_session(runner):
    a, b = runner.session(), runner.session()
    a.run_sync("open('/tmp/mine', 'w').write('a')", fresh=True)
    assert b.run_sync("import os\nos.listdir('/tmp')", fresh=True).value == "[]"
    assert a.run_sync("import os\nos.listdir('/tmp')", fresh=True).value == "['mine']"
    a.destroy()
    b.destroy()


def test_a_writable_session_mount_inside_the_workspace(runner, tmp_path):
    from wasm_runner import Mount

    shared = tmp_path / "shared"
    shared.mkdir()
    session = runner.session(mounts=(Mount(shared, "/workspace/shared", writable=True),))
    result = session.run_sync("open('shared/note.txt', 'w').write('from guest')\nopen('/workspace/shared/note.txt').read()")
    assert result.value == "'from guest'"
    assert (shared / "note.txt").read_text() == "from guest"
    other = runner.session()
    assert other.run_sync("import os\nos.path.exists('/workspace/shared/note.txt')").value == "False"
    session.destroy()
    other.destroy()
