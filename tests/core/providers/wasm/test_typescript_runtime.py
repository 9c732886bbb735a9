"""TypeScript in WebAssembly: transpiled inside the sandbox by the snapshot's sucrase, run by QuickJS."""

from __future__ import annotations

import pytest

from wasm_runner import ExecRequest, Runner
from wasm_runner.manifests import load_manifest
from wasm_runner.providers.wasm.typescript import transpiler_prelude

PROGRAM = """\
interface Shape {
  area(): number;
}
enum Color { Red, Green = 5, Blue }
type Pair<T> = [T, T];
class Square<T> implements Shape {
  constructor(private readonly side: number, public label: T) {}
  area(): number { return this.side * this.side; }
}
function first<T>(items: readonly T[]): T | undefined { return items[0]; }
abstract class Base { abstract name(): string; hello(): string { return `hi ${this.name()}`; } }
class Named extends Base { name(): string { return "ts"; } }
async function later<T>(value: T): Promise<T> {
  await new Promise<void>((resolve) => setTimeout(resolve, 5));
  return value;
}
const pair: Pair<number> = [3, 4];
const square = new Square<string>(pair[0], "sq");
console.log(square.area(), square.label, Color.Blue, first<number>([7, 8]), new Named().hello());
console.log(await later<string>("awaited"));
"""


def test_a_program_with_interfaces_enums_generics_classes_and_await_prints_its_output(runner):
    result = runner.run_sync(PROGRAM, language="typescript")
    assert result.error is None, result.stderr
    assert result.stdout == "9 sq 6 7 hi ts\nawaited\n"
    assert result.language == "typescript" and result.isolation == "wasm"


def test_a_runtime_error_reports_the_typescript_line(runner):
    code = ("interface A {\n  x: number;\n}\n\nconst a: A = { x: 1 };\nfunction boom(n: number): never {\n"
            "  throw new RangeError(`bad ${n}`);\n}\nboom(a.x);\n")
    result = runner.run_sync(code, language="typescript")
    assert result.exit_code == 1
    assert (result.error.type, result.error.message) == ("RangeError", "bad 1")
    assert result.error.line == 7  # the TypeScript source's line, types and blank lines included
    assert result.error.source == "throw new RangeError(`bad ${n}`);"


def test_a_syntax_error_is_reported_on_its_line_before_anything_runs(runner):
    result = runner.run_sync("console.log('never');\nconst x: number = ;\n", language="typescript")
    assert result.stdout == ""
    assert result.error.type == "SyntaxError" and result.error.line == 2


def test_es_modules_and_type_only_imports_run(runner):
    code = ("import type { Foo } from './nowhere';\nimport * as std from 'std';\nconst f: Foo | null = null;\n"
            "std.out.puts(`${f}\\n`);\nexport {};\n")
    result = runner.run_sync(code, language="typescript")
    assert result.error is None, result.stderr
    assert result.stdout == "null\n"


def test_what_the_transpiler_cannot_do_says_what_to_do(runner):
    namespace = runner.run_sync("namespace N { export const a = 1; }\nconsole.log(N.a);\n", language="typescript")
    assert namespace.error.type == "ReferenceError" and "typescript-native" in namespace.error.message
    decorator = runner.run_sync("function d(c: any) { return c; }\n@d\nclass A {}\n", language="typescript")
    assert decorator.error.type == "SyntaxError" and decorator.error.line == 2
    assert "decorators are not supported in WebAssembly" in decorator.error.message


def test_a_kernel_keeps_typescript_declared_state(runner):
    session = runner.session()
    first = session.run_sync("interface P { n: number }\nlet total: number = 40;\nconst p: P = { n: 2 };\n"
                             "enum K { One = 1 }\nclass Box<T> { constructor(public v: T) {} }",
                             language="typescript")
    assert first.error is None, first.stderr
    later = session.run_sync("const b: Box<number> = new Box(total);\nb.v + p.n + K.One", language="typescript")
    assert later.error is None, later.stderr
    assert later.value == "43"


def test_fresh_mode_sees_no_kernel_state(runner):
    session = runner.session()
    session.run_sync("let kept: number = 1;", language="typescript")
    fresh = session.run_sync("console.log(typeof kept)", language="typescript", fresh=True)
    assert fresh.stdout == "undefined\n"


def test_the_transpiler_is_out_of_the_programs_reach(runner):
    result = runner.run_sync("console.log(typeof (globalThis as any).__wasm_runner_transpile)", language="typescript")
    assert result.stdout == "undefined\n"


def test_javascript_is_not_transpiled(runner):
    result = runner.run_sync("const x: number = 1;", language="javascript")
    assert result.error.type == "SyntaxError"


def test_limits_hold_as_for_javascript(runner):
    result = runner.run_sync("while (true) {}", language="typescript", limits={"timeout_s": 0.5})
    assert result.limit == "timeout"


def test_a_tampered_transpiler_is_refused(tmp_path):
    manifest = load_manifest("typescript")
    fields = dict(manifest.fields, transpiler_sha256="0" * 64)
    tampered = type(manifest)(manifest.language, manifest.kind, manifest.directory, fields)
    with pytest.raises(Exception, match="sha256"):
        transpiler_prelude(tampered)


def test_typecheck_without_a_native_provider_says_so(tmp_path):
    from wasm_runner.providers.wasm.provider import WasmProvider

    with Runner(tmp_path, isolation="in-process", providers=[WasmProvider()]) as own:
        result = own.run_sync(ExecRequest(code="const x: number = 1;", language="typescript", typecheck=True))
    assert result.error is None
    assert [d.category for d in result.diagnostics] == ["checker"]
    assert "native provider" in result.diagnostics[0].message
