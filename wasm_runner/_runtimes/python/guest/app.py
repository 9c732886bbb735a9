"""Guest-side driver of the Python runtime; runs *inside* the sandbox.

Everything at module level runs once, when the component is built: the
interpreter state it leaves (stdlib table, pre-imported modules) is the
snapshot every fresh instance starts from. `WitWorld.run` executes one cell.
"""

import array
import ast
import io
import json
import linecache
import marshal
import os
import sys
import time
import traceback
import zlib

import importlib
import importlib.abc
import importlib.machinery
import importlib.resources.abc

# --- the standard library, compiled now, importable at run time -------------
# The stdlib directory the build sees is gone at run time, so every pure-Python
# module is compiled here and kept (compressed bytecode) in the snapshot.

_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "venv",
              "lib2to3", "__pycache__", "site-packages", "__phello__", "lib"}


def _collect_stdlib():
    table = {}
    # componentize-py mounts the standard library at /python while it builds.
    for root in [p for p in sys.path if p == "/python" and os.path.isdir(p)]:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("_test")]
            rel = os.path.relpath(dirpath, root)
            package = "" if rel == "." else rel.replace(os.sep, ".")
            for filename in filenames:
                if not filename.endswith(".py") or filename.startswith("_test"):
                    continue
                stem = filename[:-3]
                if stem == "__init__":
                    name, is_pkg = package, True
                else:
                    name, is_pkg = (package + "." + stem) if package else stem, False
                if not name or name in table:
                    continue
                path = os.path.join(dirpath, filename)
                try:
                    with open(path, "rb") as f:
                        code = compile(f.read(), path, "exec", dont_inherit=True, optimize=0)
                except (SyntaxError, ValueError):
                    continue
                table[name] = (is_pkg, path, zlib.compress(marshal.dumps(code), 6))
    return table


_UNAVAILABLE = {
    name: (f"No module named {name!r}: the {public} module needs a C library that the WebAssembly Python "
           f"runtime does not include; use zlib or gzip here, or run natively (profile python-data)")
    for name, public in (("_bz2", "bz2"), ("_lzma", "lzma"))
}


class _StdlibImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, table):
        self._table = table

    def find_spec(self, fullname, path=None, target=None):
        entry = self._table.get(fullname)
        if entry is None:
            if fullname in _UNAVAILABLE:
                raise ModuleNotFoundError(_UNAVAILABLE[fullname], name=fullname)
            return None
        is_pkg, origin, _ = entry
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=origin, is_package=is_pkg)
        spec.has_location = True
        if is_pkg:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def create_module(self, spec):
        return None

    def get_resource_reader(self, fullname):
        if fullname == "tzdata" or fullname.startswith("tzdata."):
            return _TzReader(fullname[len("tzdata."):].replace(".", "/") if "." in fullname else "")
        return None

    def exec_module(self, module):
        code = marshal.loads(zlib.decompress(self._table[module.__spec__.name][2]))
        exec(code, module.__dict__)

    def module_names(self):
        return sorted(self._table)


# --- the IANA time-zone database (the `tzdata` distribution) -----------------
# WASI has no /usr/share/zoneinfo, so zoneinfo falls back to the `tzdata` package through
# importlib.resources. The host copies the pinned package next to this driver for the build;
# its packages join the table above and its data files are kept here, compressed, and read
# from memory (zoneinfo opens one file per zone it loads).

_TZ_FILES = {}
"""Path below tzdata/ ("zoneinfo/Europe/Paris") -> zlib-compressed contents."""
_TZ_DIRS = {}
"""Directory below tzdata/ ("" for the package itself) -> the names it holds."""


def _collect_tzdata(table):
    root = next((os.path.join(entry, "tzdata") for entry in sys.path if entry != "/python"
                 and os.path.isfile(os.path.join(entry, "tzdata", "__init__.py"))), None)
    if root is None:
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel = "" if rel == "." else rel
        _TZ_DIRS[rel] = sorted(dirnames + filenames)
        name = "tzdata" + ("." + rel.replace("/", ".") if rel else "")
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            with open(path, "rb") as f:
                data = f.read()
            if filename == "__init__.py":
                origin = "/tzdata/" + (rel + "/" if rel else "") + filename
                code = compile(data, origin, "exec", dont_inherit=True)
                table[name] = (True, origin, zlib.compress(marshal.dumps(code), 6))
            elif not filename.endswith((".py", ".pyc")):
                _TZ_FILES[(rel + "/" if rel else "") + filename] = zlib.compress(data, 6)


class _TzPath(importlib.resources.abc.Traversable):
    """A file or directory of the kept time-zone database, for importlib.resources."""

    def __init__(self, path):
        self._path = path

    @property
    def name(self):
        return self._path.rsplit("/", 1)[-1]

    def is_dir(self):
        return self._path in _TZ_DIRS

    def is_file(self):
        return self._path in _TZ_FILES

    def iterdir(self):
        if not self.is_dir():
            raise NotADirectoryError(self._path)
        prefix = self._path + "/" if self._path else ""
        return iter([_TzPath(prefix + child) for child in _TZ_DIRS[self._path]])

    def joinpath(self, *descendants):
        parts = [p for p in "/".join((self._path, *map(str, descendants))).split("/") if p]
        return _TzPath("/".join(parts))

    __truediv__ = joinpath

    def open(self, mode="r", *args, **kwargs):
        if not self.is_file():
            raise FileNotFoundError(f"no such resource in tzdata: {self._path}")
        data = io.BytesIO(zlib.decompress(_TZ_FILES[self._path]))
        return data if "b" in mode else io.TextIOWrapper(data, *args, **kwargs)


class _TzReader:
    def __init__(self, path):
        self._path = path

    def files(self):
        return _TzPath(self._path)


_stdlib_table = _collect_stdlib()
_collect_tzdata(_stdlib_table)
STDLIB = _StdlibImporter(_stdlib_table)
sys.meta_path.insert(0, STDLIB)
sys.dont_write_bytecode = True

# Modules most programs reach for, imported now so they cost nothing at run time.
for _name in ("json", "re", "math", "random", "collections", "itertools", "functools",
              "datetime", "decimal", "fractions", "statistics", "string", "textwrap",
              "dataclasses", "typing", "pathlib", "csv", "hashlib", "base64", "copy",
              "heapq", "bisect", "enum", "operator", "struct", "uuid", "pprint", "codeop",
              "contextlib", "abc", "numbers", "io", "tempfile", "glob", "shutil", "fnmatch"):
    try:
        __import__(_name)
    except Exception:
        pass

import random  # noqa: E402

# --- standard streams ---------------------------------------------------------
# The standard streams write to WASI streams, which accept at most 8 KiB a call: a
# buffered writer retries short writes instead of losing data. Line buffering:
# output streams as it is printed, and a guest stopped by a limit keeps everything
# it printed up to then.
#
# A WASI write costs about 40 us (a round trip through the host's I/O thread). So
# during a call whose output nobody streams, the host lets the guest hold what it
# writes in two fixed buffers (the request's `hold`: bytes per stream, the room left
# in its capture), and reads them from the linear memory after the call, trapped or
# not: a held write is a copy. Bytes beyond a full buffer, or beyond the room, go
# out first in order, then everything after them, as before.

HOLD_SIZE = 64 * 1024
_held = [array.array("B", bytes(HOLD_SIZE)) for _ in range(2)]
_held_views = [memoryview(buffer) for buffer in _held]  # an exported buffer never moves
_held_fill = array.array("I", [0, 0])
"""Bytes held in each buffer: the host reads them with the buffers."""
_hold_left = [0, 0]
"""Bytes each stream may still hold or send this call before it writes through."""
_os_write = os.write


def _release(index):
    """Send what a stream holds, in order, before anything written after it."""
    fill = _held_fill[index]
    if fill:
        data = _held_views[index][:fill]
        while data:
            data = data[_os_write(index + 1, data):]
        _held_fill[index] = 0
        _hold_left[index] -= fill


class _Output(io.RawIOBase):
    """A standard stream's raw file: writes are held for the host while the call allows."""

    def __init__(self, fd):
        self._fd = fd
        self._index = fd - 1

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def write(self, data):
        index, size = self._index, len(data)
        fill = _held_fill[index]
        if fill + size > min(HOLD_SIZE, _hold_left[index]):
            _release(index)
            fill = 0
            left = _hold_left[index]
            if size > min(HOLD_SIZE, left):  # larger than the buffer, or past the room
                written = _os_write(self._fd, data)
                # past the room, nothing more is held: the host sees the overflow as it happens
                _hold_left[index] = left - written if size <= left else 0
                return written
        _held_views[index][fill:fill + size] = data
        _held_fill[index] = fill + size
        return size


def _write(fd, data, /):
    if fd in (1, 2) and _held_fill[fd - 1]:  # a direct write comes after what was printed before it
        _release(fd - 1)
    return _os_write(fd, data)


os.write = _write


def _stream(fd, line_buffering):
    return io.TextIOWrapper(io.BufferedWriter(_Output(fd), 64 * 1024), encoding="utf-8",
                            errors="backslashreplace", line_buffering=line_buffering)


sys.stdout = sys.__stdout__ = _stream(1, True)
sys.stderr = sys.__stderr__ = _stream(2, True)

# --- blocking calls end at the deadline -------------------------------------
# The host's epoch interruption cannot reach a guest blocked inside a host call
# (a sleep, a select with a timeout), so the blocking primitives are bounded by
# the cell's deadline here; past it, the guest spins until the host stops it.

_deadline = [float("inf")]
_monotonic = time.monotonic


def _bounded_wait(wait, seconds):
    remaining = _deadline[0] - _monotonic()
    if seconds is None or seconds > remaining:
        if remaining > 0:
            wait(remaining)
        while True:  # the host's deadline check traps this loop within one tick
            pass
    return wait(seconds)


def _install_guards():
    import select

    real_sleep = time.sleep
    real_select = select.select

    def sleep(seconds, /):
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        _bounded_wait(real_sleep, seconds)

    def select_(rlist, wlist, xlist, timeout=None, /):
        if timeout is None or timeout > 0:
            remaining = _deadline[0] - _monotonic()
            if timeout is None or timeout > remaining:
                ready = real_select(rlist, wlist, xlist, 0)
                if any(ready):
                    return ready
                _bounded_wait(real_sleep, timeout)
        return real_select(rlist, wlist, xlist, timeout)

    # staticmethod objects are callable and do not bind as methods
    # (selectors keeps `_select = select.select` as a class attribute).
    time.sleep = staticmethod(sleep)
    select.select = staticmethod(select_)
    for name in ("poll", "epoll", "kqueue", "devpoll"):
        if hasattr(select, name):
            delattr(select, name)  # selectors falls back to the bounded select


_install_guards()
del _install_guards


def _patch_asyncio():
    # The event loop's self-pipe is a socketpair, which WASI denies; it only serves
    # wake-ups from other threads and signals, which do not exist here.
    from asyncio import selector_events

    loop = selector_events.BaseSelectorEventLoop
    loop._make_self_pipe = lambda self: None
    loop._close_self_pipe = lambda self: None
    loop._write_to_self = lambda self: None


_patch_asyncio()
del _patch_asyncio

# --- descriptors a run changed ------------------------------------------------
# The host may reuse a one-shot instance after restoring its memory to the state
# the warm-up call left. A file a run left open would stay open on the host side:
# opens are counted (audit hooks cannot be removed), and after a run the
# descriptors they could have taken (the table frees last-in first-out, from the
# first one after the preopens) are probed. The restored memory also holds the
# handles of the standard streams and preopens the warm-up call obtained, so a run
# that closed one of them (the only way to change them: WASI has no dup2) must not
# be reused either: their identities are compared with the warm-up call's.

_FD_EVENTS = frozenset({"open", "os.scandir", "sqlite3.connect"})
_opened = [0]
_fstat = os.fstat
_lseek = os.lseek
_base_fds = [None]
"""(mode, device, inode) or errno of each descriptor below the first free one, at warm-up."""
_base_offsets = [None]
"""Offset or errno of each of those descriptors at warm-up (EBADF once one is closed)."""


def _count_opens(event, _args):
    if event in _FD_EVENTS:
        _opened[0] += 1


sys.addaudithook(_count_opens)


def _identities(fd_base):
    identities = []
    for fd in range(fd_base):
        try:
            st = _fstat(fd)
        except OSError as exc:
            identities.append(exc.errno)
        else:
            identities.append((st.st_mode, st.st_dev, st.st_ino))
    return identities


def _offsets(fd_base):
    offsets = []
    for fd in range(fd_base):
        try:
            offsets.append(_lseek(fd, 0, os.SEEK_CUR))
        except OSError as exc:
            offsets.append(exc.errno)
    return offsets


def _descriptors_changed(fd_base):
    for fd in range(fd_base, fd_base + _opened[0]):
        try:
            _fstat(fd)
        except OSError:
            continue
        return True
    if _base_fds[0] is None:
        return False
    if _opened[0]:  # one closed and another opened takes its number: compare what they are
        return _identities(fd_base) != _base_fds[0]
    # Nothing opened, so a descriptor can only have been closed: the guest's own table
    # says so (an fstat of a preopen is a host round trip of 50 us, an lseek is not).
    return _offsets(fd_base) != _base_offsets[0]


def _descriptors_intact(fd_base):
    """Whether the standard streams and preopens are the warm-up call's, asked by the host of
    the restored driver (a run could have rewritten the one that reported on it): each is
    touched, so a handle a run dropped traps here instead of in the next run."""
    if _base_fds[0] is None:  # never warmed up: no baseline (the host reuses warmed instances)
        return True
    identities = _identities(fd_base)
    try:
        os.read(0, 1)  # the host's stdin between calls is empty
    except OSError:
        pass
    for fd in (1, 2):  # the host drops what is written between calls
        os.write(fd, b"\n")
    return identities == _base_fds[0]


def _open_descriptors(fd_base, span=256):
    """Descriptors open past the preopens (files a cell left open), and whether the standard
    streams and preopens are still the warm-up call's: a kernel snapshot cannot carry either."""
    open_fds = []
    for fd in range(fd_base, fd_base + span):
        try:
            _fstat(fd)
        except OSError:
            continue
        open_fds.append(fd)
    if _base_fds[0] is not None and _identities(fd_base) != _base_fds[0]:
        open_fds.append(-1)
    return open_fds


# --- running a cell ----------------------------------------------------------

VALUE_REPR_LIMIT = 64 * 1024
_namespace = {"__name__": "__main__", "__builtins__": __builtins__}
_outputs = []
"""The call's rich outputs, in order: display()ed objects, then the last expression."""


def _rich(value, plain=None):
    """An object as an output: its HTML (with the plain text beside it) where it has one."""
    if plain is None:
        plain = repr(value)
        if len(plain) > VALUE_REPR_LIMIT:
            plain = plain[:VALUE_REPR_LIMIT] + "...[truncated]"
    render = getattr(type(value), "_repr_html_", None)
    if render is not None:
        try:
            html = render(value)
        except Exception:  # noqa: BLE001 - a broken representation falls back to plain text
            html = None
        if isinstance(html, str) and html and len(html) <= 4 * VALUE_REPR_LIMIT:
            _outputs.append({"type": "text/html", "data": html, "plain": plain})
            return
    _outputs.append({"type": "text/plain", "data": plain})


def display(*objects):
    """Show objects in the call's outputs, in order (as Jupyter's display())."""
    for value in objects:
        _rich(value)


import builtins as _builtins  # noqa: E402

_builtins.display = display
_cells = [0]
_seeded = [False]
_applied_env = [None]


def _compile_cell(code, filename):
    if "\n" not in code.strip():  # a one-line expression (`f(x)`, `print(...)`) skips the AST round trip
        try:
            return None, compile(code, filename, "eval", dont_inherit=True)
        except SyntaxError:
            pass
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    return body, (compile(last, filename, "eval", dont_inherit=True) if last else None)


def _exec_cell(code, filename, want_value=True):
    """Run a cell in the kernel's namespace; return the last expression's value (or None).
    Without `want_value` the source compiles directly: the AST round trip costs twice the compile."""
    if want_value:
        body, last = _compile_cell(code, filename)
    else:
        body, last = compile(code, filename, "exec", dont_inherit=True), None
    if body is not None:
        exec(body, _namespace)
    return eval(last, _namespace) if last is not None else None


def _error(exc, tb, filename=None):
    # Drop the driver's own frames (the cell runner, the stdlib importer).
    summary = traceback.TracebackException(type(exc), exc, tb)
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if frame.filename != __file__])
    error = {"type": type(exc).__name__, "message": str(exc), "traceback": "".join(summary.format())}
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        error["line"] = exc.lineno
    for frame in summary.stack:  # the innermost line of the cell itself
        if frame.filename == filename:
            error["line"], error["source"] = frame.lineno, (frame.line or "").strip()
    return error


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


_packages_seen = [None]


def _use_packages(packages):
    """The session's package directory (the host's, read-only) on the import path; `packages` is
    [path, version]: a new version (an install since the last call) makes imports look again."""
    if packages[0] not in sys.path:
        sys.path.append(packages[0])
    # Only the caches that can hold the directory: `importlib.invalidate_caches()` imports
    # importlib.metadata (about 50 M instructions, most of a session's first call) to clear its own.
    finder = sys.path_importer_cache.get(packages[0])
    if finder is not None:
        finder.invalidate_caches()
    metadata = sys.modules.get("importlib.metadata")
    if metadata is not None:
        metadata.MetadataPathFinder.invalidate_caches()
    _packages_seen[0] = packages


def _sandbox_module():
    """`import sandbox; sandbox.install("pkg==1.0")`: the host resolves, downloads and links the
    packages into the session's read-only /packages (the guest has no network of its own)."""
    import types

    import wit_world

    module = types.ModuleType("sandbox", _sandbox_module.__doc__)

    def install(*requirements, index=None):
        """Install pure-Python packages into this session; returns the host's result (a dict).
        A refusal (not found, native code, policy, quota) raises RuntimeError with the reason."""
        request = {"python": [str(r) for r in requirements]}
        if index is not None:
            request["index"] = str(index)
        result = _loads(wit_world.install_packages(_dumps(request)))
        if PACKAGES_PATH not in sys.path:
            sys.path.append(PACKAGES_PATH)
        importlib.invalidate_caches()
        if not result.get("ok"):
            error = result.get("error") or {}
            message = error.get("message", "the host refused the install")
            if error.get("hint"):
                message += f" (hint: {error['hint']})"
            raise RuntimeError(message)
        return result

    module.install = install
    module.NetworkDenied = NetworkDenied
    module.NetworkLimitExceeded = NetworkLimitExceeded
    sys.modules["sandbox"] = module


# --- tools (code mode) -------------------------------------------------------------


class ToolError(Exception):
    """A tool call the host refused or the tool failed; `kind` says which (see the result's tool_calls)."""

    def __init__(self, message, kind="tool_error"):
        super().__init__(message)
        self.kind = kind


ToolError.__module__ = "sandbox"  # as guest code imports it


class _Resolved:
    """A tool call made inside a running event loop: already answered, awaited for its value."""

    __slots__ = ("_value", "_error")

    def __init__(self, value, error):
        self._value, self._error = value, error

    def __await__(self):
        if self._error is not None:
            raise self._error
        return self._value
        yield  # noqa: unreachable - makes this a generator


_run_tools = [None]
"""This run's tools by snake_case and camelCase name ({name: (property names, schema)}), or None
until its first tool call asks the host (one question per run)."""


def _json_type(value, kind):
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = {"string": str, "boolean": bool, "object": dict, "array": (list, tuple)}.get(kind)
    return value is None if kind == "null" else expected is None or isinstance(value, expected)


class _Shown:
    """A value as an error message shows it, made only when a message is."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __format__(self, spec):
        value = self.value
        return _dumps(value[:60]) if isinstance(value, str) else _dumps(value)[:80]


_SIMPLE_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
                 "null": (type(None),), "array": (list, tuple), "object": (dict,)}
_NOTES = frozenset(("type", "description", "title", "default", "examples"))


def _arguments_check(schema):
    """A tool's arguments checker: `check(kwargs)` -> what is wrong, or None. For the usual schema
    (named arguments of plain types, some required, no others allowed) a call whose values have
    exactly those types passes without a walk of the schema; any other call, or any other schema,
    gets the full walk (`_schema_error`), which also words the message."""
    def full(kwargs):
        return _schema_error(schema, kwargs)

    properties = schema.get("properties") if isinstance(schema, dict) else None
    if (not isinstance(properties, dict) or schema.get("type") != "object" or not _NOTES.issuperset(schema.keys() - {
            "properties", "required", "additionalProperties"}) or schema.get("additionalProperties", True) not in (True, False)):
        return full
    types = {}
    for key, item in properties.items():
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not _NOTES.issuperset(item) or kind not in _SIMPLE_TYPES:
            return full
        types[key] = _SIMPLE_TYPES[kind]
    required = [key for key in schema.get("required") or () if isinstance(key, str)]
    closed = schema.get("additionalProperties", True) is False

    def check(kwargs):
        for key in required:
            if key not in kwargs:
                return full(kwargs)
        for key, value in kwargs.items():
            kinds = types.get(key)
            if kinds is None:
                if closed:
                    return full(kwargs)
            elif type(value) not in kinds:  # a subclass or 1.0 for an integer: the full walk decides
                return full(kwargs)
        return None

    return check


def _schema_error(schema, value, where=""):
    """How `value` breaks `schema`, or None. A subset of JSON Schema (types, required, properties,
    enum, const, items, sizes, bounds, anyOf/allOf): a keyword not known here passes, the host
    checks the whole schema again, so this check is never stricter than the host's."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return None
    at = f"{where}: " if where else ""
    shown = _Shown(value)
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_json_type(value, k) for k in kinds):
            return f'{at}{shown} is not of type {" or ".join(_dumps(k) for k in kinds)}'
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        return f"{at}{shown} is not one of {_dumps(schema['enum'])[:120]}"
    if "const" in schema and value != schema["const"]:
        return f"{at}{_dumps(schema['const'])[:80]} was expected"
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for key in schema.get("required") or ():
            if key not in value:
                return f'{at}"{key}" is a required property'
        extra = schema.get("additionalProperties", True) if "patternProperties" not in schema else True
        for key, item in value.items():
            if key in properties:
                problem = _schema_error(properties[key], item, f"{where}/{key}" if where else key)
            elif extra is False:
                problem = f"{at}Additional properties are not allowed ({_dumps(key)} was unexpected)"
            else:
                problem = _schema_error(extra, item, f"{where}/{key}" if where else key)
            if problem:
                return problem
    if isinstance(value, (list, tuple)):
        for bound, too in (("minItems", lambda n: len(value) < n), ("maxItems", lambda n: len(value) > n)):
            if isinstance(schema.get(bound), int) and too(schema[bound]):
                return f"{at}the array breaks {bound}: {schema[bound]}"
        for index, item in enumerate(value if "prefixItems" not in schema else ()):
            problem = _schema_error(schema.get("items"), item, f"{where}/{index}" if where else str(index))
            if problem:
                return problem
    if isinstance(value, str):
        for bound, too in (("minLength", lambda n: len(value) < n), ("maxLength", lambda n: len(value) > n)):
            if isinstance(schema.get(bound), int) and too(schema[bound]):
                return f"{at}{shown} breaks {bound}: {schema[bound]}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for bound, too in (("minimum", lambda n: value < n), ("maximum", lambda n: value > n),
                           ("exclusiveMinimum", lambda n: value <= n), ("exclusiveMaximum", lambda n: value >= n)):
            limit = schema.get(bound)
            if isinstance(limit, (int, float)) and not isinstance(limit, bool) and too(limit):
                return f"{at}{shown} breaks {bound}: {limit}"
    options = schema.get("anyOf")
    if isinstance(options, list) and options and all(_schema_error(o, value, where) for o in options):
        return f"{at}{shown} matches none of the allowed forms"
    for part in schema.get("allOf") or ():
        problem = _schema_error(part, value, where)
        if problem:
            return problem
    return None


def _sandbox_tools():
    """`from sandbox import tools; tools.search_issues(query="x")`: each call goes to the host,
    which decides it (the run's tools only, budget, schema, timeout) and answers with JSON.
    Inside a running event loop a call returns an awaitable (`await tools.search_issues(...)`).
    A call's arguments are checked here against the tool's schema first (asked of the host once
    per run), so a wrong call fails at once; the host checks every call again."""
    import wit_world

    def run_tools():
        table = _run_tools[0]
        if table is None:
            table = {}
            answer = _loads(wit_world.call_tool('{"describe":true}'))
            for spec in answer.get("value") or () if answer.get("ok") else ():
                schema = spec.get("parameters") or {}
                entry = (list(schema.get("properties") or ()), _arguments_check(schema), _dumps(spec["name"]))
                head, *rest = spec["name"].split("_")
                table[spec["name"]] = table[head + "".join(p[:1].upper() + p[1:] for p in rest)] = entry
            _run_tools[0] = table
        return table

    def call(name, args, kwargs):
        found = (_run_tools[0] if _run_tools[0] is not None else run_tools()).get(name)
        if found is None:  # a name the run lacks goes on, to be refused and recorded by the host
            try:
                request = _dumps({"name": name, "args": list(args), "kwargs": kwargs})
            except (TypeError, ValueError) as exc:
                raise ToolError(f"{name}(): arguments must be JSON values: {exc}", "invalid_arguments") from None
        else:  # bound and checked here first
            names, check, quoted = found
            if args:
                if len(args) > len(names):
                    raise ToolError(f"{name}() takes {len(names)} arguments, {len(args)} were given positionally",
                                    "invalid_arguments")
                bound = dict(zip(names, args))
                for key, value in kwargs.items():
                    if key in bound:
                        raise ToolError(f"{name}() got two values for {key!r}", "invalid_arguments")
                    bound[key] = value
                kwargs = bound
            problem = check(kwargs)
            if problem:
                raise ToolError(f"{name}(): {problem}", "invalid_arguments")
            try:
                request = '{"name":' + quoted + ',"kwargs":' + _dumps(kwargs) + "}"
            except (TypeError, ValueError) as exc:
                raise ToolError(f"{name}(): arguments must be JSON values: {exc}", "invalid_arguments") from None
        answer = _loads(wit_world.call_tool(request))
        if answer.get("ok"):
            return answer.get("value")
        error = answer.get("error") or {}
        raise ToolError(error.get("message", "the host refused the call"), error.get("kind", "tool_error"))

    running_loop = []  # asyncio's, once imported

    class Tool:
        __slots__ = ("__name__",)

        def __init__(self, name):
            self.__name__ = name

        def __call__(self, *args, **kwargs):
            if not running_loop:
                asyncio = sys.modules.get("asyncio")
                if asyncio is None:
                    return call(self.__name__, args, kwargs)
                running_loop.append(asyncio.events._get_running_loop)
            if running_loop[0]() is None:
                return call(self.__name__, args, kwargs)
            try:
                return _Resolved(call(self.__name__, args, kwargs), None)
            except ToolError as exc:
                return _Resolved(None, exc)

        def __repr__(self):
            return f"<tool {self.__name__}>"

    class Tools:
        """The run's tools, by name: `tools.<name>(...)`; a name the run was not given raises ToolError."""

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            found = Tool(name)
            setattr(self, name, found)  # a name's next lookup skips __getattr__ (the tool is asked of the host by name)
            return found

        def __dir__(self):
            return sorted(name for name in run_tools() if name.islower())  # the snake_case names

    module = sys.modules["sandbox"]
    module.tools = Tools()
    module.ToolError = ToolError


# --- HTTP through the host ---------------------------------------------------------
# There are no sockets here. http.client's connections (and so urllib.request, and libraries
# built on them) hand each request to the host through the `http-request` import: the host
# checks the run's network policy on the address it connects to, adds brokered credentials the
# guest never sees, verifies TLS, and streams the answer back. Raw `socket` stays unavailable.


class NetworkDenied(PermissionError):
    """The host refused the destination: the run's network policy does not allow it."""


class NetworkLimitExceeded(OSError):
    """The run's network cap (bytes both ways) or its deadline stopped the transfer."""


def _install_http():
    import base64
    import http.client

    import wit_world

    b64encode, b64decode = base64.b64encode, base64.b64decode
    errors = {"denied": NetworkDenied, "limit": NetworkLimitExceeded}

    def host(message):
        answer = _loads(wit_world.http_request(_dumps(message)))
        if not answer.get("ok"):
            error = answer.get("error") or {}
            text = error.get("message") or "the host refused the request"
            if error.get("hint"):
                text += f" (hint: {error['hint']})"
            raise errors.get(error.get("kind"), ConnectionError)(text)
        return answer

    class HostStream(io.RawIOBase):
        """A response as http.client reads it from a socket: its head, then its body from the host."""

        def __init__(self, head, first, handle, eof):
            self._data, self._at = head + first, 0
            self._handle, self._eof = handle, eof

        def readable(self):
            return True

        def readinto(self, buffer):
            while self._at >= len(self._data):
                if self._eof:
                    return 0
                answer = host({"op": "read", "handle": self._handle, "size": max(len(buffer), 65536)})
                self._data, self._at, self._eof = b64decode(answer["body"]), 0, answer["eof"]
            n = min(len(buffer), len(self._data) - self._at)
            buffer[:n] = self._data[self._at:self._at + n]
            self._at += n
            return n

        def close(self):
            if not self._eof and not self.closed:
                self._eof = True
                try:
                    host({"op": "close", "handle": self._handle})
                except OSError:
                    pass
            super().close()

    class HostSocket:
        def __init__(self, stream=None):
            self._stream = stream

        def makefile(self, mode="rb", buffering=-1):
            return io.BufferedReader(self._stream, 65536)

        def sendall(self, data):
            pass

        def close(self):
            pass

        def settimeout(self, timeout):
            pass

    def dechunk(data):
        out, at = bytearray(), 0
        while True:
            end = data.index(b"\r\n", at)
            size = int(data[at:end].split(b";")[0], 16)
            if size == 0:
                return bytes(out)
            out += data[end + 2:end + 2 + size]
            at = end + 4 + size

    class HTTPConnection(http.client.HTTPConnection):
        """http.client's connection, its requests made by the host (same API, no socket)."""

        scheme = "http"
        _host_request = None
        _host_answer = None

        def connect(self):
            self.sock = HostSocket()

        def putrequest(self, method, url, skip_host=False, skip_accept_encoding=False):
            super().putrequest(method, url, skip_host, skip_accept_encoding)
            self._host_request = [method, url, [], [], False]  # method, url, headers, body, sent directly
            self._head_next = False

        def putheader(self, header, *values):
            super().putheader(header, *values)
            if isinstance(header, bytes):
                header = header.decode("latin-1")
            parts = []
            for value in values:
                if isinstance(value, bytes):
                    value = value.decode("latin-1")
                parts.append(str(value))
            if self._host_request is not None:
                self._host_request[2].append((header, "\r\n\t".join(parts)))

        def _send_output(self, message_body=None, encode_chunked=False):
            self._head_next = True  # the head http.client writes first is the host's to make
            try:
                super()._send_output(message_body, encode_chunked=False)
            finally:
                self._head_next = False
            if self._host_request is not None:
                self._host_request[4] = False

        def send(self, data):
            if self._head_next:
                self._head_next = False
                return
            request = self._host_request
            if request is None:
                raise http.client.CannotSendRequest("no request in progress")
            if hasattr(data, "read"):
                for chunk in self._read_readable(data):
                    request[3].append(bytes(chunk))
            else:
                request[3].append(bytes(data))
            request[4] = True

        def _authority(self):
            host = f"[{self.host}]" if ":" in self.host else self.host
            return host if self.port == self.default_port else f"{host}:{self.port}"

        def request(self, method, url, body=None, headers={}, *, encode_chunked=False):
            super().request(method, url, body, headers, encode_chunked=encode_chunked)
            # The whole request is known: send it now, where a socket would fail (urllib wraps these errors).
            self._host_answer = self._exchange()

        def _exchange(self):
            request, self._host_request = self._host_request, None
            if request is None:
                raise http.client.ResponseNotReady("no request was sent")
            self._HTTPConnection__state = http.client._CS_IDLE
            method, url, headers, chunks, direct = request
            body = b"".join(chunks)
            if direct and any(n.lower() == "transfer-encoding" and "chunked" in v.lower() for n, v in headers):
                body = dechunk(body)  # a library framed its own chunks: the host frames the body again
            if not url.startswith(("http://", "https://")):
                url = f"{self.scheme}://{self._authority()}{url if url.startswith('/') else '/' + url}"
            answer = host({"op": "request", "method": method, "url": url, "headers": headers,
                           "body": b64encode(body).decode("ascii") if body else ""})
            return method, answer

        def getresponse(self):
            exchange, self._host_answer = self._host_answer, None
            method, answer = exchange or self._exchange()
            lines = [f"HTTP/1.1 {answer['status']} {answer['reason']}"]
            lines += [f"{name}: {value}" for name, value in answer["headers"]]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
            stream = HostStream(head, b64decode(answer["body"]), answer["handle"], answer["eof"])
            response = self.response_class(HostSocket(stream), self.debuglevel, method=method)
            response.begin()
            return response

        def close(self):
            self._host_request = self._host_answer = None
            super().close()

    class HTTPSConnection(HTTPConnection):
        """HTTPS through the host, which verifies the destination's certificate (a context given here is
        not used: the guest has no TLS of its own)."""

        scheme = "https"
        default_port = http.client.HTTPS_PORT

        def __init__(self, host, port=None, *, context=None, **kwargs):
            super().__init__(host, port, **kwargs)

    http.client.HTTPConnection = HTTPConnection
    http.client.HTTPSConnection = HTTPSConnection
    http.client._create_https_context = lambda http_version: None
    if "HTTPSConnection" not in http.client.__all__:
        http.client.__all__.append("HTTPSConnection")
    import urllib.request  # after the patch: it defines its HTTPS handler only if HTTPS exists  # noqa: F401


_install_http()
del _install_http


PACKAGES_PATH = "/packages"


def _run_cell(request):
    packages = request.get("packages")
    if packages is not None and packages != _packages_seen[0]:
        _use_packages(packages)
    env = request.get("env")
    if env is not None and env != _applied_env[0]:  # a plain dict comparison: os.environ's is slow
        os.environ.clear()
        os.environ.update(env)
        _applied_env[0] = env
    cwd = request.get("cwd", "/workspace")
    if os.getcwd() != cwd:
        os.chdir(cwd)
    if request.get("warm"):
        # First the host resources, always in this order: a restored kernel's memory holds the
        # handle numbers its original was given, and a new instance obtains the same ones by
        # making the same requests (`handles_only`, all a restore needs before its pages are laid).
        if "fd_base" in request:
            _base_fds[0] = _identities(request["fd_base"])
            _base_offsets[0] = _offsets(request["fd_base"])
        for fd in (1, 2):
            os.write(fd, b"\n")  # the standard streams' output handles (the host discards it)
        if request.get("handles_only"):
            return {"exit_code": 0}
        # Then cells that leave no trace, so the first real call finds warm pages.
        _exec_cell("print('')", "<warm-up>")  # a one-line cell whose output (discarded by the host) is flushed
        _exec_cell("_warm = None\ndel _warm", "<warm-up>")  # the multi-statement path
        _cells[0] = 0
        linecache.cache.pop("<warm-up>", None)
        return {"exit_code": 0}
    _hold_left[:] = request.get("hold") or (0, 0)
    _held_fill[0] = _held_fill[1] = 0
    if request.get("reseed"):  # the first call of a restored or forked kernel: its own random sequence
        _seeded[0] = False
    if not _seeded[0]:  # after the warm-up: an instance restored to that state reseeds
        random.seed()  # the snapshot's PRNG state is shared by every instance
        _seeded[0] = True
    stdin = request.get("stdin")
    sys.stdin = io.StringIO(stdin) if stdin else _EMPTY_STDIN
    _deadline[0] = _monotonic() + request.get("timeout_s", 3600)
    _run_tools[0] = None  # this run's tools are asked of the host at its first call
    _opened[0] = 0
    tests = request.get("tests")
    check = tests is not None  # the check harness: a verdict, no values
    response = _run_source(request["code"], request.get("filename"), want_value=not check)
    if check:  # the tests run only after the program succeeded
        response["phase"] = "program"
        if response["exit_code"] == 0 and "error" not in response:
            response = _run_source(tests, "<tests>", want_value=False)
            response["phase"] = "tests"
    if "fd_base" in request:
        response["descriptors_changed"] = _descriptors_changed(request["fd_base"])
    return response


def _run_source(code, filename=None, want_value=True):
    _cells[0] += 1
    filename = filename or f"<cell {_cells[0]}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    response = {"exit_code": 0}
    if _outputs:
        _outputs.clear()
    try:
        value = _exec_cell(code, filename, want_value)
        if value is not None:
            _namespace["_"] = value
            text = repr(value)
            if len(text) > VALUE_REPR_LIMIT:
                text = text[:VALUE_REPR_LIMIT] + "...[truncated]"
            response["value"] = text
            _rich(value, text)
    except SystemExit as exc:
        response["exit_code"] = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - everything becomes a result
        error = _error(exc, exc.__traceback__, filename)
        sys.stderr.write(error["traceback"])
        response["exit_code"] = 1
        response["error"] = error
    if _outputs:
        response["outputs"] = list(_outputs)
    return response


class _EmptyStdin(io.StringIO):
    def write(self, s):
        raise io.UnsupportedOperation("not writable")


_EMPTY_STDIN = _EmptyStdin("")


def _warm_up():
    """Run the cell path at build time, so the snapshot holds its warmed caches and fresh
    instances write (copy) fewer memory pages on their first call."""
    import contextlib

    cells = [{"code": code} for code in ("x = 1\nprint(x)\nx", "def f(a):\n    return [a] * 2\nf(3)", "1/0",
                                         "import sys; sys.exit(2)")]
    cells.append({"code": "def f(a):\n    return a\n", "tests": "assert f(1) == 1\nassert f(2) == 3\n"})  # a check
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        # Many rounds: the interpreter specialises the driver's bytecode as it runs (counters
        # and caches in the code objects); settled in the snapshot, runs leave those pages alone.
        for _ in range(64):
            for cell in cells:
                WitWorld().run(_dumps({**cell, "cwd": os.getcwd(), "env": dict(os.environ), "timeout_s": 60}))
    _namespace.clear()
    _namespace.update({"__name__": "__main__", "__builtins__": __builtins__})
    _cells[0] = 0
    _applied_env[0] = None
    _deadline[0] = float("inf")
    _seeded[0] = False
    for key in [k for k in linecache.cache if k.startswith("<cell") or k == "<tests>"]:
        del linecache.cache[key]


# The driver's own references: a cell may replace `json.dumps` for itself.
_loads, _dumps = json.loads, json.dumps


class WitWorld:
    def run(self, request: str) -> str:
        _t0 = time.perf_counter()
        try:
            call = _loads(request)
            if call.get("snapshot_objects"):
                response = _snapshot_object_addresses()
            elif call.get("held_layout"):  # where the host reads held output (asked before any user code)
                response = {"held": [_held_fill.buffer_info()[0], _held[0].buffer_info()[0],
                                     _held[1].buffer_info()[0], HOLD_SIZE]}
            elif "open_descriptors" in call:  # before a kernel snapshot: what the host could not recreate
                response = {"open": _open_descriptors(call["open_descriptors"])}
            elif "probe_descriptors" in call:  # right after a reset: this driver is the restored one
                response = {"intact": _descriptors_intact(call["probe_descriptors"])}
            else:
                response = _run_cell(call)
        except BaseException as exc:  # noqa: BLE001 - an escaping exception would kill the instance
            response = {"exit_code": 1, "error": _error(exc, exc.__traceback__)}
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        response["guest_ms"] = (time.perf_counter() - _t0) * 1000
        return _dumps(response)


_sandbox_module()
_sandbox_tools()
_warm_up()

# The environment a run with no variables of its own gets (the host's base environment,
# passed to the build): set now, such runs skip applying it, which costs about 0.2 ms.
if "WASM_RUNNER_GUEST_ENV" in os.environ:
    _applied_env[0] = _loads(os.environ["WASM_RUNNER_GUEST_ENV"])
    os.environ.clear()
    os.environ.update(_applied_env[0])

# --- the snapshot's objects, made immortal by the host ---------------------------
# Every object reachable from the modules now lives as long as the snapshot. The host marks
# them immortal in the compiled image (their reference counts set to CPython's immortal
# value), so that runs never write those counts: each such write dirties a page of the heap,
# which a reset then copies back (a fifth of a check's written pages). This list keeps
# every one of them alive, at its address, in the snapshot; the host asks for the addresses.


def _reachable_objects():
    import builtins
    import types

    seen = {}
    stack = [sys.modules, builtins.__dict__]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
        if type(obj) is types.CodeType:  # not a container to the collector; these are stored, not computed
            stack.extend((obj.co_consts, obj.co_names, obj.co_filename, obj.co_name, obj.co_qualname,
                          obj.co_linetable, obj.co_exceptiontable))
    return list(seen.values())


def _snapshot_object_addresses():
    import array
    import base64

    addresses = array.array("I", sorted(map(id, _SNAPSHOT_OBJECTS)))  # wasm32: 4-byte little-endian
    return {"addresses": base64.b64encode(addresses.tobytes()).decode("ascii")}


import gc  # noqa: E402

_SNAPSHOT_OBJECTS = _reachable_objects()

# Grow the heap now, while building, to just under the smallest memory limit (32 MiB):
# an instance is reused after a run only if its memory did not grow, and with about
# 11 MiB free (rather than under one) most runs fit. Free pages cost nothing.
bytearray(11 * 1024 * 1024)

# --- the heap's holes, filled -------------------------------------------------------
# Building frees many objects between ones that stay, and the allocator (dlmalloc: this
# build has no pymalloc) reuses such holes first: a run's small objects would land on
# hundreds of pages all over the heap (3000 of them on 1180 pages), each then written, and
# copied back by a reset. Filled now, with objects kept for good, the holes are gone and a
# run allocates from the free end of the heap, a few contiguous pages.


def _fill_heap_holes(batch_size=4096, most=8 << 20):
    filler = []
    while len(filler) * batch_size * 16 < most:  # a bound, should the heap never show a stretch
        batch = [None] * batch_size  # allocated whole first: growing it would free (make) holes
        for i in range(batch_size):
            batch[i] = object()  # a 16-byte chunk: the smallest the allocator has
        filler.append(batch)
        addresses = sorted(map(id, batch))
        if addresses[-1] - addresses[0] == 16 * (batch_size - 1):  # one stretch: no hole was left
            break
    return filler


gc.collect()
_HEAP_FILLER = _fill_heap_holes()

# Objects of the snapshot are never collected: keeping them out of the garbage
# collector's scans keeps their memory pages shared (copy-on-write) and untouched.
gc.freeze()
