"""The native JavaScript toolchain: TypeScript with Node (type stripping) and bun, tsc, Biome, typecheck."""

from __future__ import annotations

import pytest

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.profiles import Profiles
from wasm_runner.providers.native import NATIVE_PROFILES, doctor, find_js_toolchain
from wasm_runner.providers.native.typecheck import parse_tsc_output
from wasm_runner.runner import default_providers

needs_js_toolchain = pytest.mark.skipif(
    find_js_toolchain() is None,
    reason="the JavaScript toolchain is not built (wasm-runner prepare / python -m wasm_runner.providers.native prepare)")

PROGRAM = """\
interface Point { x: number; y: number }
enum Axis { X = "x", Y = "y" }
function pick<T extends Point>(p: T, axis: Axis): number { return p[axis]; }
await Promise.resolve();
const engine = typeof (globalThis as any).Bun === "object" ? "bun" : "node";
console.log(engine, pick({ x: 4, y: 2 }, Axis.X) * 10 + 2);
"""
MEMORY = Limits(timeout_s=120, memory_bytes=1024 * 1024 * 1024)


@pytest.fixture(scope="module")
def js_runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("js-toolchain"), isolation="in-process", providers=default_providers()) as runner:
        yield runner


def _profile_request(name: str, code: str) -> ExecRequest:
    profiles = Profiles()
    _, profile = profiles.get(name)
    return profiles.request(profile, language=None, code=code, command=None, stdin="", env={}, limits=None,
                            fresh=False, id=None, path_language="typescript")


@needs_js_toolchain
@pytest.mark.parametrize(("profile", "engine"), [("typescript-native", "node"), ("bun", "bun")])
def test_the_native_profiles_run_a_ts_file(js_runner, profile, engine):
    result = js_runner.run_sync(_profile_request(profile, PROGRAM))
    assert result.error is None, result.stderr
    assert result.stdout == f"{engine} 42\n"
    assert result.isolation == "bubblewrap" and result.language == "typescript"


@needs_js_toolchain
@pytest.mark.parametrize("profile", ["typescript-native", "bun"])
def test_a_native_runtime_error_names_the_typescript_line(js_runner, profile):
    code = "interface A { n: number }\nconst a: A = { n: 1 };\n\nthrow new TypeError(`bad ${a.n}`);\n"
    result = js_runner.run_sync(_profile_request(profile, code))
    assert result.exit_code == 1
    assert result.error is not None and "bad 1" in result.error.message
    assert (result.error.line, result.error.source) == (4, "throw new TypeError(`bad ${a.n}`);")


@needs_js_toolchain
def test_bun_runs_a_class_with_a_decorator(js_runner):
    code = ("function logged(value: any, context: ClassMethodDecoratorContext) {\n"
            "  return function (this: any, ...args: any[]) { console.log('call', String(context.name)); "
            "return value.apply(this, args); };\n}\n"
            "class A {\n  @logged\n  hi(n: number): number { return n * 2; }\n}\nconsole.log(new A().hi(21));\n")
    result = js_runner.run_sync(_profile_request("bun", code))
    assert result.error is None, result.stderr
    assert result.stdout == "call hi\n42\n"


@needs_js_toolchain
def test_tsc_and_biome_check_workspace_files_in_a_session(js_runner):
    session = js_runner.session()
    session.workspace.ensure()
    (session.path / "bad.ts").write_text("export const n: number = 'one';\n")
    (session.path / "good.ts").write_text("export const n: number = 1;\n")
    tsc = session.run_sync(ExecRequest(command=["tsc", "--noEmit", "--pretty", "false", "bad.ts", "good.ts"],
                                       limits=MEMORY))
    assert tsc.exit_code == 2
    assert "bad.ts(1,14): error TS2322" in tsc.stdout and "good.ts" not in tsc.stdout
    biome = session.run_sync(ExecRequest(command=["biome", "check", "good.ts"], limits=MEMORY))
    assert biome.exit_code == 0, biome.stderr
    assert "Checked 1 file" in biome.stderr + biome.stdout
    lint = session.run_sync(ExecRequest(command=["biome", "check", "bad.ts"], limits=MEMORY))
    assert lint.exit_code != 0  # single quotes: Biome's formatter wants double ones


@needs_js_toolchain
def test_typecheck_reports_a_type_error_with_its_line_and_code(js_runner):
    code = "interface P { n: number }\nconst label: string = 'x';\nconst p: P = { n: label };\nconsole.log(p.n);\n"
    result = js_runner.run_sync(ExecRequest(code=code, language="typescript", typecheck=True))
    assert [(d.file, d.line, d.column, d.code) for d in result.diagnostics] == [("<input>", 3, 16, 2322)]
    assert "not assignable to type 'number'" in result.diagnostics[0].message
    assert result.stdout == "x\n"  # the program runs either way


@needs_js_toolchain
def test_typecheck_block_keeps_a_program_with_type_errors_from_running(js_runner):
    code = "const n: number = 'two';\nconsole.log('ran');\n"
    blocked = js_runner.run_sync(ExecRequest(code=code, language="typescript", typecheck="block"))
    assert blocked.stdout == "" and blocked.exit_code == 1
    assert blocked.error is not None and blocked.error.type == "TypeCheckError" and blocked.error.line == 1
    assert "1 type error, the program did not run; line 1:" in blocked.error.message
    assert [d.code for d in blocked.diagnostics] == [2322]
    clean = js_runner.run_sync(ExecRequest(code="console.log('ran');", language="typescript", typecheck="block"))
    assert (clean.stdout, clean.diagnostics, clean.error) == ("ran\n", [], None)


@needs_js_toolchain
def test_typecheck_of_a_correct_program_returns_no_diagnostics(js_runner):
    code = "const xs: number[] = [1, 2];\nconst total: number = xs.reduce((a, b) => a + b, 0);\nawait 0;\nconsole.log(total);\n"
    result = js_runner.run_sync(ExecRequest(code=code, language="typescript", typecheck=True))
    assert result.diagnostics == []
    assert result.stdout == "3\n"


@needs_js_toolchain
def test_typecheck_has_its_own_time_limit(js_runner):
    result = js_runner.run_sync(ExecRequest(code="const a = 1;", language="typescript", typecheck=True,
                                            typecheck_timeout_s=0.05))
    assert [d.category for d in result.diagnostics] == ["checker"]
    assert "typecheck_timeout_s" in result.diagnostics[0].message


def test_typecheck_is_for_typescript_only():
    with pytest.raises(ValueError, match="typescript"):
        ExecRequest(code="1", language="python", typecheck=True)


def test_tsc_output_is_parsed_into_diagnostics():
    text = ("../tmp/.wasm-runner-check/input.ts(2,7): error TS2322: Type 'string' is not assignable to type 'number'.\n"
            "lib.ts(9,1): warning TS6133: 'x' is declared but never read.\n"
            "  continued detail\n"
            "error TS5023: Unknown compiler option '--bad'.\n")
    found = parse_tsc_output(text)
    assert [(d.file, d.line, d.column, d.code, d.category) for d in found] == [
        ("<input>", 2, 7, 2322, "error"), ("lib.ts", 9, 1, 6133, "warning"), ("", 0, 0, 5023, "error")]
    assert found[1].message.endswith("never read.\ncontinued detail")


def test_the_native_profiles_name_their_engine():
    assert NATIVE_PROFILES["typescript-native"] == {"language": "typescript", "provider": "native"}
    assert _profile_request("bun", "1").env["WASM_RUNNER_JS_RUNTIME"] == "bun"


@needs_js_toolchain
def test_doctor_lists_each_tool_and_its_version():
    report = doctor()
    tools = report["js_toolchain"]["tools"]
    assert set(tools) == {"node", "bun", "tsc", "biome", "uv"}
    assert tools["node"].startswith("24.") and tools["tsc"].startswith("6.")
    assert report["profiles"]["typescript-native"] and report["profiles"]["bun"]


@needs_js_toolchain
def test_tsc_runs_in_a_bash_session_under_the_profiles_default_limits(js_runner):
    """The built-in `bash` profile's memory is sized for tsc (it peaks near 275 MiB; the 256 MiB
    default killed it): a type check of a small file passes with no limits in the request."""
    session = js_runner.session()
    session.workspace.ensure()
    (session.path / "main.ts").write_text(
        "interface User { name: string; age: number }\n"
        "const users: User[] = [{ name: 'ada', age: 36 }];\n"
        "export const total = users.reduce((sum, user) => sum + user.age, 0);\n")
    profiles = Profiles()
    request = profiles.request(profiles.get("bash")[1], language=None, code="tsc --noEmit main.ts && echo checked",
                               command=None, stdin="", env={}, limits=None, fresh=False, id=None)
    assert request.language == "bash" and request.limits.memory_bytes >= 512 * 1024 * 1024
    result = session.run_sync(request)
    assert result.limit is None and result.exit_code == 0, (result.limit, result.stderr)
    assert result.stdout == "checked\n"
