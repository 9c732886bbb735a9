"""Driver of a native Python kernel; runs *inside* the bubblewrap sandbox.

Part of the untrusted program: the host believes nothing it says beyond the cell's own
results (its value, error and outputs, checked in shape and size by the host); limits,
deadlines and restarts are decided by the host on what it observes itself.

Protocol: one JSON line per call on the request descriptor (argv[1]), one JSON line per
answer on the reply descriptor (argv[2]); the program's output goes to its standard
streams, flushed before the answer is written. The first line written is {"ready": ...}
once the preloaded modules are imported (argv[3:]), so a kernel made ahead pays them
before a session asks.
"""

import ast
import base64
import builtins
import importlib
import io
import json
import linecache
import os
import shlex
import signal
import site
import subprocess
import sys
import traceback

REQUEST_FD, REPLY_FD = int(sys.argv[1]), int(sys.argv[2])
PRELOAD = sys.argv[3:]
VALUE_REPR_LIMIT = 100_000
OUTPUT_BUDGET = [4 << 20]
"""Bytes of rich outputs one call may return (the request may lower it); past it they are dropped."""

sys.path[0] = ""  # modules of the workspace (the working directory) import, as with `python file.py` there
sys.stdout.reconfigure(line_buffering=True, errors="backslashreplace")
sys.stderr.reconfigure(line_buffering=True, errors="backslashreplace")

_namespace = {"__name__": "__main__", "__builtins__": builtins}
_outputs = []
_spent = [0]
_cells = [0]
_applied_env = [None]
_site_dirs = [()]
_saved_figures = set()
"""Figures saved to a file or already shown by display() during the call: not a second copy inline."""


class _Interrupt:
    """Where the host's SIGINT lands: in the cell's code it raises KeyboardInterrupt; while a call is
    being set up (before its code runs) it is kept and raised as the code starts, so the call still
    answers; between calls (a deadline that met a cell just ending) it is dropped."""

    busy = False
    in_cell = False
    pending = False

    @classmethod
    def handle(cls, signum, frame):
        if cls.in_cell:
            raise KeyboardInterrupt
        if cls.busy:
            cls.pending = True

    @classmethod
    def enter_cell(cls):
        cls.in_cell = True
        if cls.pending:
            cls.pending = False
            raise KeyboardInterrupt


signal.signal(signal.SIGINT, _Interrupt.handle)


def _preload():
    loaded = []
    for name in PRELOAD:
        try:
            if name == "matplotlib":
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot  # noqa: F401
            else:
                __import__(name)
            loaded.append(name)
        except Exception:  # noqa: BLE001 - a module that is not installed is simply not preloaded
            pass
    return loaded


def _add(kind, data, plain=None):
    size = len(data) + len(plain or "")
    if _spent[0] + size > OUTPUT_BUDGET[0]:
        _outputs.append({"type": "text/plain", "data": f"[output dropped: {size} bytes past the outputs budget]"})
        return
    _spent[0] += size
    item = {"type": kind, "data": data}
    if plain is not None:
        item["plain"] = plain
    _outputs.append(item)


def _short_repr(value):
    text = repr(value)
    return text if len(text) <= VALUE_REPR_LIMIT else text[:VALUE_REPR_LIMIT] + "...[truncated]"


def _figure_png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _is_figure(value):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(value, figure.Figure)


def _rich(value):
    """One object as outputs: a figure as PNG, else its richest representation, with plain text."""
    if _is_figure(value):
        _add("image/png", _figure_png(value), _short_repr(value))
        _saved_figures.add(id(value))  # shown: the end of the cell does not show it again
        return
    plain = _short_repr(value)
    for method, kind in (("_repr_png_", "image/png"), ("_repr_html_", "text/html")):
        render = getattr(type(value), method, None)
        if render is None:
            continue
        try:
            data = render(value)
        except Exception:  # noqa: BLE001 - a broken representation falls back to plain text
            data = None
        if data:
            if kind == "image/png" and isinstance(data, bytes):
                data = base64.b64encode(data).decode("ascii")
            if isinstance(data, str):
                _add(kind, data, plain)
                return
    _add("text/plain", plain)


def display(*objects):
    """Show objects in the call's outputs, in order (as Jupyter's display())."""
    for value in objects:
        _rich(value)


def _flush_figures():
    """Figures open now become PNG outputs and are closed (a figure is shown once: not at all inline
    when it was saved to a file). Returns the ids of the figures shown or saved."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return set()
    done = set(_saved_figures)
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        if id(figure) not in done:
            _add("image/png", _figure_png(figure), f"<Figure {number}>")
            done.add(id(figure))
    pyplot.close("all")
    _saved_figures.clear()
    return done


def _patch_show():
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and getattr(pyplot.show, "__module__", "") != __name__:
        def show(*args, **kwargs):
            _flush_figures()
        pyplot.show = show
        figure_class = sys.modules["matplotlib.figure"].Figure
        savefig = figure_class.savefig

        def savefig_noting_files(self, fname, *args, **kwargs):
            if isinstance(fname, (str, os.PathLike)):
                _saved_figures.add(id(self))
            return savefig(self, fname, *args, **kwargs)
        figure_class.savefig = savefig_noting_files


class PipError(Exception):
    """A `%pip` command failed: the cell stops there, as the code after it expects the package."""


def _shell(command, shell="/bin/sh", note=True):
    """`!command` and `%%bash` cells: the command's output joins the cell's, as in Jupyter."""
    sys.stdout.flush()
    sys.stderr.flush()
    done = subprocess.run([shell, "-c", command], stdin=subprocess.DEVNULL, check=False)
    if done.returncode and note:
        print(f"[exit status {done.returncode}]", file=sys.stderr)
    return done.returncode


def _pip(arguments):
    """`%pip install x`: the session's pip (as in a shell: its venv, its registries, the run's network
    policy), then what it installed imports at once."""
    status = _shell("pip " + arguments, note=False)
    _add_site_dirs(_site_dirs[0])
    importlib.invalidate_caches()
    if status:
        raise PipError(f"pip exited with status {status}: its output above says why")


def _magic(name):
    raise SyntaxError(f"%{name} is not supported here: use !command for a shell command, %pip for installs, "
                      "or start the cell with %%bash")


builtins._wr_shell, builtins._wr_pip, builtins._wr_magic = _shell, _pip, _magic


def _translate_magics(code):
    """Jupyter's habits as Python (`!cmd`, `%pip ...`, a `%%bash` cell); only for code that is not valid
    Python as written, so that no valid program changes meaning."""
    try:
        ast.parse(code)
        return code
    except SyntaxError:
        pass
    lines = code.split("\n")
    if lines[0].strip() in ("%%bash", "%%sh"):
        body = "\n".join(lines[1:])
        return f"_wr_shell({body!r}, {'/bin/bash' if lines[0].strip() == '%%bash' else '/bin/sh'!r})"
    translated = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if stripped.startswith("!"):
            line = f"{indent}_wr_shell({stripped[1:]!r})"
        elif stripped == "%pip" or stripped.startswith("%pip "):
            line = f"{indent}_wr_pip({stripped[4:].strip()!r})"
        elif stripped.startswith("%") and len(stripped) > 1 and stripped[1].isalpha():
            line = f"{indent}_wr_magic({shlex.split(stripped[1:])[0]!r})"
        translated.append(line)
    return "\n".join(translated)


builtins.display = display


def _compile_cell(code, filename):
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    return body, (compile(last, filename, "eval", dont_inherit=True) if last else None)


def _error(exc, filename):
    summary = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if frame.filename != __file__])
    error = {"type": type(exc).__name__, "message": str(exc), "traceback": "".join(summary.format())}
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        error["line"] = exc.lineno
    for frame in summary.stack:
        if frame.filename == filename:
            error["line"], error["source"] = frame.lineno, (frame.line or "").strip()
    return error


def _exit_code(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _add_site_dirs(directories):
    """The session's own site-packages (its venv) once it exists, where a venv has it: after the
    standard library, ahead of the kernel's own site-packages. What the session installed since the
    kernel started then imports without a restart."""
    for directory in directories:
        if directory in sys.path or not os.path.isdir(directory):
            continue
        before = set(sys.path)
        site.addsitedir(directory)  # its .pth files too
        added = [entry for entry in sys.path if entry not in before]
        for entry in added:
            sys.path.remove(entry)
        own = set(site.getsitepackages())
        at = next((i for i, entry in enumerate(sys.path) if entry in own), len(sys.path))
        sys.path[at:at] = added


def _run(request):
    env = request.get("env")
    if env is not None and env != _applied_env[0]:
        os.environ.clear()
        os.environ.update(env)
        _applied_env[0] = env
    os.chdir(request.get("cwd", "/workspace"))  # again each call: the directory may have been bound since the last one
    _site_dirs[0] = tuple(request.get("site_dirs") or ())
    _add_site_dirs(_site_dirs[0])
    importlib.invalidate_caches()  # modules written since the last call
    sys.stdin = io.StringIO(request.get("stdin", ""))
    _outputs.clear()
    _saved_figures.clear()  # ids are reused once objects are freed: only this call's count
    _spent[0] = 0
    OUTPUT_BUDGET[0] = int(request.get("outputs_budget", OUTPUT_BUDGET[0]))
    _cells[0] += 1
    filename = f"<cell {_cells[0]}>"
    code = _translate_magics(request["code"])
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    reply = {"exit_code": 0}
    try:
        _Interrupt.enter_cell()
        _patch_show()
        body, last = _compile_cell(code, filename)
        exec(body, _namespace)
        value = eval(last, _namespace) if last is not None else None
        _patch_show()
        shown = _flush_figures()
        if value is not None:
            _namespace["_"] = value
            reply["value"] = _short_repr(value)
            if id(value) not in shown:
                _rich(value)
    except SystemExit as exc:
        reply["exit_code"] = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - everything becomes a result
        _Interrupt.in_cell = False
        error = _error(exc, filename)
        sys.stderr.write(error["traceback"])
        reply["exit_code"] = 1
        reply["error"] = error
        try:
            _flush_figures()
        except Exception:  # noqa: BLE001
            pass
    finally:
        _Interrupt.in_cell = False
    reply["outputs"] = list(_outputs)
    return reply


def _send(message):
    data = (json.dumps(message) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(REPLY_FD, view):]


def main():
    requests = os.fdopen(REQUEST_FD, "rb", buffering=0)
    _send({"ready": _preload()})
    buffered = io.BufferedReader(requests)
    while True:
        try:
            line = buffered.readline()
            if not line:
                return
            _Interrupt.busy, _Interrupt.pending = True, False
            reply = _run(json.loads(line))
            sys.stdout.flush()
            sys.stderr.flush()
            _send(reply)
        except KeyboardInterrupt:  # only when the program put back Python's own handler
            continue
        finally:
            _Interrupt.busy = False


main()
