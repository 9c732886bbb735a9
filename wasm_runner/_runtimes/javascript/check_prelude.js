// Run inside the sandbox before the check harness's tests (JavaScript and TypeScript): the
// `assert` that test suites written for Node use (`require('node:assert')` or the global),
// small enough to read. Part of the untrusted program: the verdict rests on what the host sees.
(() => {
  class AssertionError extends Error {
    constructor(message) { super(message); this.name = "AssertionError"; }
  }
  const show = (v) => { try { return JSON.stringify(v) ?? String(v); } catch (e) { return String(v); } };
  const fail = (message, fallback) => {
    if (message instanceof Error) throw message;
    const error = new AssertionError(message ?? fallback);
    // Its innermost frames are this prelude's (the constructor, fail, the assert function):
    // the tests' own line is the one that failed.
    const frames = String(error.stack).split("\n");
    let own = 0;
    error.stack = frames.filter((line) => !(/^\s*at /.test(line) && own++ < 3)).join("\n");
    throw error;
  };
  const same = (a, b, strict) => {
    if (strict ? Object.is(a, b) : (a == b || (a !== a && b !== b))) return true;
    if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
    if (strict && Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    if (a instanceof Date && b instanceof Date) return a.getTime() === b.getTime();
    if (a instanceof Map && b instanceof Map) {
      if (a.size !== b.size) return false;
      for (const [k, v] of a) if (!b.has(k) || !same(v, b.get(k), strict)) return false;
      return true;
    }
    if (a instanceof Set && b instanceof Set) {
      if (a.size !== b.size) return false;
      for (const v of a) if (!b.has(v)) return false;
      return true;
    }
    const ka = Object.keys(a), kb = Object.keys(b);
    if (ka.length !== kb.length) return false;
    for (const k of ka) if (!Object.prototype.hasOwnProperty.call(b, k) || !same(a[k], b[k], strict)) return false;
    return true;
  };
  const assert = (value, message) => { if (!value) fail(message, `expected a truthy value, got ${show(value)}`); };
  assert.ok = assert;
  assert.AssertionError = AssertionError;
  assert.fail = (message) => fail(message, "failed");
  assert.equal = (a, b, m) => { if (!(a == b || (a !== a && b !== b))) fail(m, `${show(a)} == ${show(b)}`); };
  assert.notEqual = (a, b, m) => { if (a == b) fail(m, `${show(a)} != ${show(b)}`); };
  assert.strictEqual = (a, b, m) => { if (!Object.is(a, b)) fail(m, `${show(a)} === ${show(b)}`); };
  assert.notStrictEqual = (a, b, m) => { if (Object.is(a, b)) fail(m, `${show(a)} !== ${show(b)}`); };
  assert.deepEqual = (a, b, m) => { if (!same(a, b, false)) fail(m, `${show(a)} deepEqual ${show(b)}`); };
  assert.notDeepEqual = (a, b, m) => { if (same(a, b, false)) fail(m, `${show(a)} notDeepEqual ${show(b)}`); };
  assert.deepStrictEqual = (a, b, m) => { if (!same(a, b, true)) fail(m, `${show(a)} deepStrictEqual ${show(b)}`); };
  assert.notDeepStrictEqual = (a, b, m) => { if (same(a, b, true)) fail(m, `${show(a)} notDeepStrictEqual ${show(b)}`); };
  assert.throws = (fn, expected, m) => {
    try { fn(); } catch (e) { return; }
    fail(typeof expected === "string" ? expected : m, "expected the function to throw");
  };
  assert.strict = assert;
  globalThis.assert = assert;
  if (typeof globalThis.require === "undefined") {
    globalThis.require = (name) => {
      if (name === "assert" || name === "node:assert" || name === "assert/strict" || name === "node:assert/strict") return assert;
      throw new Error(`require(${JSON.stringify(name)}): only 'assert' is available in the sandbox`);
    };
  }
})();
