"""Fresh Python runs: output, values, errors, exit codes, stdin, environment."""

import pytest

from wasm_runner import ExecRequest, Limits

STDLIB_MODULES = """
abc argparse array ast asyncio base64 bdb binascii bisect builtins wsgiref.simple_server calendar cmath cmd code codecs codeop
collections collections.abc colorsys compileall concurrent.futures configparser contextlib contextvars copy
copyreg csv dataclasses datetime decimal difflib dis doctest email email.mime.text email.parser encodings
enum errno filecmp fileinput fnmatch fractions ftplib functools gc getopt gettext glob graphlib gzip hashlib
heapq hmac html html.parser http http.client http.cookies imaplib importlib importlib.metadata inspect io
ipaddress itertools json json.decoder keyword linecache locale logging logging.handlers http.server mailbox
marshal math mimetypes netrc numbers opcode operator optparse os os.path pathlib pickle pickletools pkgutil
platform plistlib poplib posixpath pprint profile pstats py_compile pyclbr pydoc queue quopri random re
reprlib rlcompleter runpy sched secrets selectors shelve shlex shutil signal smtplib socket sqlite3 sre_compile
sre_parse stat statistics string stringprep struct symtable sys sysconfig tabnanny tarfile tempfile textwrap
this timeit token tokenize tomllib trace traceback types typing unicodedata unittest unittest.mock urllib
urllib.parse urllib.request urllib.robotparser uuid warnings wave weakref webbrowser xml xml.dom.minidom xml.etree.ElementTree
xml.sax zipapp zipfile zipimport zlib zoneinfo tzdata
""".split()


def test_print_goes_to_stdout(runner):
    result = runner.run_sync("print(1 + 1)")
    assert result.stdout == "2\n"
    assert result.exit_code == 0 and result.error is None and result.limit is None
    assert result.isolation == "wasm" and result.language == "python"


def test_last_expression_value_is_returned_like_a_repl(runner):
    assert runner.run_sync("x = [1, 2]\nx * 2").value == "[1, 2, 1, 2]"
    assert runner.run_sync("None").value is None
    assert runner.run_sync("'a'").value == "'a'"


def test_uncaught_exception_is_a_result_with_a_traceback_of_user_code(runner):
    result = runner.run_sync("def f():\n    raise KeyError('missing')\nf()")
    assert result.exit_code == 1
    assert result.error.type == "KeyError"
    assert "missing" in result.error.message
    assert 'File "<cell 1>", line 2, in f' in result.error.traceback
    assert "app.py" not in result.error.traceback  # the driver's frames are hidden
    assert "KeyError" in result.stderr


def test_sys_exit_sets_exit_code(runner):
    assert runner.run_sync("import sys; sys.exit(3)").exit_code == 3
    assert runner.run_sync("import sys; sys.exit(0)").exit_code == 0
    result = runner.run_sync("raise SystemExit('bye')")
    assert result.exit_code == 1 and "bye" in result.stderr


def test_stdin_is_readable(runner):
    result = runner.run_sync("import sys; print(sys.stdin.read().upper())", stdin="hello\n")
    assert result.stdout == "HELLO\n\n"
    assert runner.run_sync("print(repr(input.__name__)); import sys; print(sys.stdin.read() == '')").stdout.endswith("True\n")


def test_syntax_error_is_reported(runner):
    result = runner.run_sync("def (:")
    assert result.exit_code == 1 and result.error.type == "SyntaxError"


def test_environment_is_the_allowlist_plus_explicit_variables(runner, monkeypatch):
    monkeypatch.setenv("HOST_SECRET", "do-not-leak")
    result = runner.run_sync("import os; print(sorted(os.environ.items()))", env={"MY_VAR": "1"})
    assert "do-not-leak" not in result.stdout and "HOST_SECRET" not in result.stdout
    env = dict(eval(result.stdout))
    assert env["MY_VAR"] == "1"
    assert env["HOME"] == "/workspace" and env["TZ"] == "UTC"
    assert set(env) <= {"HOME", "PWD", "TMPDIR", "LANG", "LC_ALL", "TZ", "USER", "PYTHONIOENCODING", "MY_VAR"}


def test_a_run_without_variables_sees_exactly_the_base_environment(runner):
    from wasm_runner.providers.wasm.sandbox import BASE_ENV

    show = "import os; print(sorted(os.environ.items()))"
    assert dict(eval(runner.run_sync(show).stdout)) == BASE_ENV  # nothing of the build's environment
    assert dict(eval(runner.run_sync(show, env={"MY_VAR": "1"}).stdout)) == {**BASE_ENV, "MY_VAR": "1"}
    assert dict(eval(runner.run_sync(show).stdout)) == BASE_ENV  # nor of an earlier run's


def test_each_fresh_run_has_its_own_random_state(runner):
    draws = {runner.run_sync("import random; print(random.random())").stdout for _ in range(3)}
    assert len(draws) == 3


def test_a_hundred_stdlib_modules_import_in_one_fresh_run(runner):
    assert len(STDLIB_MODULES) >= 100
    code = (
        "import importlib\nfailed = []\n"
        f"for name in {STDLIB_MODULES!r}:\n"
        "    try:\n        importlib.import_module(name)\n"
        "    except Exception as e:\n        failed.append((name, repr(e)))\n"
        "failed"
    )
    result = runner.run_sync(code, limits=Limits(timeout_s=120))
    assert result.error is None, result.stderr
    assert result.value == "[]"


def test_stdlib_modules_work_not_just_import(runner):
    code = """
import json, csv, io, sqlite3, decimal, datetime, statistics, fractions, hashlib, zipfile, difflib, textwrap
import xml.etree.ElementTree as ET, email.message, pathlib, dataclasses
db = sqlite3.connect(":memory:"); db.execute("create table t(x)"); db.execute("insert into t values (41)")
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z: z.writestr("a.txt", "zip")
(json.dumps({"a": 1}), db.execute("select x + 1 from t").fetchone()[0], str(decimal.Decimal("0.1") * 3),
 statistics.mean([1, 2, 3]), str(fractions.Fraction(1, 3) * 3), hashlib.sha256(b"").hexdigest()[:8],
 ET.fromstring("<a><b>x</b></a>").find("b").text, zipfile.ZipFile(buf).read("a.txt").decode(),
 list(csv.reader(["a,b"])), len(list(difflib.unified_diff(["a"], ["b"]))) > 0)
"""
    result = runner.run_sync(code)
    assert result.error is None, result.stderr
    assert result.value == "('{\"a\": 1}', 42, '0.3', 2, '1', 'e3b0c442', 'x', 'zip', [['a', 'b']], True)"


@pytest.mark.parametrize(
    "code, error_type",
    [
        ("import socket; socket.socket().connect(('127.0.0.1', 80))", "PermissionError"),
        ("import socket; socket.getaddrinfo('example.com', 80)", "gaierror"),
        ("import subprocess; subprocess.run(['ls'])", "OSError"),
        ("import threading; threading.Thread(target=print).start()", "RuntimeError"),
        ("import ctypes", "ModuleNotFoundError"),
        ("import os; os.fork()", "AttributeError"),
        ("import ssl", "ModuleNotFoundError"),
        ("import bz2", "ModuleNotFoundError"),
        ("import lzma", "ModuleNotFoundError"),
    ],
)
def test_what_wasi_cannot_do_fails_with_a_python_exception(runner, code, error_type):
    result = runner.run_sync(code)
    assert result.exit_code == 1 and result.limit is None
    assert result.error is not None
    assert result.error.type == error_type, result.error
    assert runner.run_sync("print('still fine')").stdout == "still fine\n"


@pytest.mark.parametrize("module", ["bz2", "lzma"])
def test_bz2_and_lzma_fail_with_an_import_error_saying_what_to_use_instead(runner, module):
    error = runner.run_sync(f"import {module}").error
    assert error.type == "ModuleNotFoundError"
    assert "WebAssembly Python runtime" in error.message and "zlib" in error.message


def test_zoneinfo_reads_the_iana_database_for_summer_and_winter_offsets(runner):
    code = """
import datetime, zoneinfo
paris = zoneinfo.ZoneInfo("Europe/Paris")
(str(datetime.datetime(2026, 7, 1, 12, tzinfo=paris).utcoffset()),
 str(datetime.datetime(2026, 1, 15, 12, tzinfo=paris).utcoffset()),
 datetime.datetime(2026, 7, 1, 12, tzinfo=paris).tzname(),
 "America/New_York" in zoneinfo.available_timezones())
"""
    result = runner.run_sync(code)
    assert result.value == "('2:00:00', '1:00:00', 'CEST', True)", result.stderr
    missing = runner.run_sync("import zoneinfo\nzoneinfo.ZoneInfo('Nowhere/Land')").error
    assert missing.type == "ZoneInfoNotFoundError"


def test_the_last_expression_and_displayed_objects_are_typed_outputs(runner):
    code = """
class Table:
    def _repr_html_(self):
        return "<table><tr><td>1</td></tr></table>"
    def __repr__(self):
        return "Table(1)"
display("shown", Table())
41 + 1
"""
    result = runner.run_sync(code)
    assert [(o.type, o.data, o.plain) for o in result.outputs] == [
        ("text/plain", "'shown'", None),
        ("text/html", "<table><tr><td>1</td></tr></table>", "Table(1)"),
        ("text/plain", "42", None),
    ]
    assert result.value == "42"
    assert runner.run_sync("x = 1").outputs == []


def test_exec_request_object_and_id_are_echoed(runner):
    result = runner.run_sync(ExecRequest(code="print('x')", id="item-7"))
    assert result.id == "item-7" and result.stdout == "x\n"


async def test_async_runs_in_parallel_without_blocking_the_loop(runner):
    import asyncio
    import time

    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    results = await asyncio.gather(*[runner.run("import time; time.sleep(0.3); print('ok')") for _ in range(4)])
    elapsed = time.monotonic() - started
    task.cancel()
    assert all(r.stdout == "ok\n" for r in results)
    assert ticks >= 10  # the event loop kept running while guests slept
    assert elapsed < 4 * 0.3 + 1.0


def test_limits_may_be_given_as_a_dict_and_are_checked_as_limits_are(runner):
    assert runner.run_sync("while True: pass", limits={"timeout_s": 0.3}).limit == "timeout"
    with pytest.raises(TypeError, match="keyword argument 'timeout'"):
        runner.run_sync("pass", limits={"timeout": 1})
    with pytest.raises(ValueError, match="timeout_s"):
        runner.run_sync("pass", limits={"timeout_s": -1})
    with pytest.raises(TypeError, match="limits must be a Limits or a dict"):
        runner.run_sync("pass", limits=5)
