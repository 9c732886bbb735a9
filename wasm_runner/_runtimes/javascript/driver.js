// wasm-runner guest driver for QuickJS-NG (qjs-wasi-reactor).
//
// Evaluated as a global script by `qjs --std -e <this file> <config>` when the host
// builds its pre-initialised snapshot; every instance starts from that memory image.
// The host (wasm_runner/providers/wasm/javascript.py) then runs each execution as one
// "turn": it evaluates `__wasm_runner.turn(<request JSON>)` and drives QuickJS's event
// loop (js_std_await) until the returned promise settles with the result JSON.
//
// Whatever depends on the instance (working directory, the Math.random seed, the
// performance clock's origin) is set up at an instance's first turn, not here: this
// code runs once, inside the snapshot, without any files or environment.
//
// Event-loop protocol: a read handler stays registered on a host-only descriptor
// (config.host_fd), so QuickJS's loop waits through poll_oneoff with that descriptor
// whenever it has no job to run and no timer due. The host (which implements
// poll_oneoff) sleeps until the next timer, or, when no timer is left either, reports
// the descriptor readable: the program is idle, and the turn ends. Errors thrown by
// callbacks and promise jobs reach `onUncaught`, rejections `onRejection` (both called
// by the host's additions to the module).
(() => {
  'use strict';

  const config = JSON.parse(scriptArgs[0]);
  const std = globalThis.std;
  const os = globalThis.os;
  const HOST_FD = config.host_fd;
  const MAX_VALUE_CHARS = config.max_value_chars;
  const WORKSPACE = config.workspace;

  scriptArgs.length = 0;
  scriptArgs.push('<input>');

  // The TypeScript snapshot evaluates its transpiler (../typescript/transpile.js) before this
  // file; the driver keeps it, out of the program's reach.
  const transpile = typeof globalThis.__wasm_runner_transpile === 'function' ? globalThis.__wasm_runner_transpile : null;
  delete globalThis.__wasm_runner_transpile;

  // ---------------------------------------------------------------- inspect

  const IDENT = /^[A-Za-z_$][\w$]*$/;
  const TypedArray = Object.getPrototypeOf(Uint8Array);
  const objectToString = (v) => Object.prototype.toString.call(v);

  function quote(s) {
    // Node-style single-quoted string for nested values.
    const body = JSON.stringify(s).slice(1, -1).replace(/\\"/g, '"').replace(/'/g, "\\'");
    return `'${body}'`;
  }

  function fnName(f) {
    let src = '';
    try { src = Function.prototype.toString.call(f); } catch (e) { /* ignore */ }
    if (/^class[\s{]/.test(src)) return f.name ? `[class ${f.name}]` : '[class (anonymous)]';
    return f.name ? `[Function: ${f.name}]` : '[Function (anonymous)]';
  }

  const DRIVER_FRAME = /\((?:<cmdline>|<wasm-runner>):\d+|^\s*at evalScript \(native\)/;

  function errorText(e) {
    let head;
    try {
      head = `${e.name}: ${e.message}`;
    } catch (err) {
      head = 'Error';
    }
    let stack = '';
    try { stack = typeof e.stack === 'string' ? e.stack : ''; } catch (err) { /* ignore */ }
    // The driver's own frames are not the program's.
    stack = stack.replace(/<evalScript>/g, currentFilename)
      .split('\n').filter((l) => !DRIVER_FRAME.test(l)).join('\n');
    if (stack && !stack.startsWith(head)) return stack.trim() ? `${head}\n${stack.replace(/\n$/, '')}` : head;
    return (stack || head).replace(/\n$/, '');
  }

  function key(k) {
    if (typeof k === 'symbol') return `[${k.toString()}]`;
    return IDENT.test(k) ? k : quote(k);
  }

  function ctorName(v) {
    try {
      const proto = Object.getPrototypeOf(v);
      if (proto === null) return null;
      const c = proto.constructor;
      return typeof c === 'function' && c.name ? c.name : '';
    } catch (e) {
      return '';
    }
  }

  function wrap(open, items, close, indent) {
    if (items.length === 0) return `${open}${close}`;
    const one = `${open} ${items.join(', ')} ${close}`;
    if (one.length <= 72 && !items.some((s) => s.includes('\n'))) return one;
    const pad = '  '.repeat(indent + 1);
    return `${open}\n${pad}${items.map((s) => s.replace(/\n/g, `\n${pad}`)).join(`,\n${pad}`)}\n${'  '.repeat(indent)}${close}`;
  }

  function inspect(v, depth = 0, seen = []) {
    switch (typeof v) {
      case 'string': return depth === 0 ? v : quote(v);
      case 'number': return Object.is(v, -0) ? '-0' : String(v);
      case 'bigint': return `${v}n`;
      case 'boolean': return String(v);
      case 'undefined': return 'undefined';
      case 'symbol': return v.toString();
      case 'function': return fnName(v);
      default: break;
    }
    if (v === null) return 'null';
    if (seen.includes(v)) return '[Circular]';
    if (v instanceof Error) return errorText(v);
    if (v instanceof Date) return isNaN(v.getTime()) ? 'Invalid Date' : v.toISOString();
    if (v instanceof RegExp) return String(v);
    if (v instanceof Promise) return 'Promise {}';
    if (v instanceof WeakMap || v instanceof WeakSet) return `${ctorName(v)} { <items unknown> }`;
    if (v instanceof ArrayBuffer) return `ArrayBuffer { byteLength: ${v.byteLength} }`;
    const tooDeep = depth > 2;
    const inner = seen.concat([v]);
    const more = (n) => `... ${n} more item${n > 1 ? 's' : ''}`;
    if (Array.isArray(v) || v instanceof TypedArray) {
      const name = Array.isArray(v) ? '' : `${ctorName(v)}(${v.length}) `;
      if (tooDeep) return Array.isArray(v) ? '[Array]' : `[${ctorName(v)}]`;
      const items = [];
      const n = Math.min(v.length, 100);
      for (let i = 0; i < n; i++) items.push(i in v ? inspect(v[i], depth + 1, inner) : '<empty>');
      if (v.length > n) items.push(more(v.length - n));
      if (Array.isArray(v)) {
        for (const k of Object.keys(v)) {
          if (!/^\d+$/.test(k)) items.push(`${key(k)}: ${inspect(v[k], depth + 1, inner)}`);
        }
      }
      return name + wrap('[', items, ']', depth);
    }
    if (v instanceof Map) {
      if (tooDeep) return '[Map]';
      const items = [];
      for (const [k, val] of v) {
        if (items.length >= 100) { items.push(more(v.size - 100)); break; }
        items.push(`${inspect(k, depth + 1, inner)} => ${inspect(val, depth + 1, inner)}`);
      }
      return `Map(${v.size}) ${wrap('{', items, '}', depth)}`;
    }
    if (v instanceof Set) {
      if (tooDeep) return '[Set]';
      const items = [];
      for (const val of v) {
        if (items.length >= 100) { items.push(more(v.size - 100)); break; }
        items.push(inspect(val, depth + 1, inner));
      }
      return `Set(${v.size}) ${wrap('{', items, '}', depth)}`;
    }
    const name = ctorName(v);
    const tag = objectToString(v).slice(8, -1);
    let prefix = '';
    if (name === null) prefix = '[Object: null prototype] ';
    else if (name && name !== 'Object') prefix = `${name} `;
    else if (!name && tag !== 'Object') prefix = `${tag} `;
    if (tooDeep) return name && name !== 'Object' ? `[${name}]` : '[Object]';
    const items = [];
    let keys;
    try { keys = Reflect.ownKeys(v); } catch (e) { keys = []; }
    for (const k of keys) {
      let d;
      try { d = Object.getOwnPropertyDescriptor(v, k); } catch (e) { continue; }
      if (!d || (!d.enumerable && typeof k !== 'symbol')) continue;
      if (items.length >= 100) { items.push(more(keys.length - 100)); break; }
      let shown;
      if (d.get || d.set) shown = d.get && d.set ? '[Getter/Setter]' : d.get ? '[Getter]' : '[Setter]';
      else shown = inspect(d.value, depth + 1, inner);
      items.push(`${key(k)}: ${shown}`);
    }
    return prefix + wrap('{', items, '}', depth);
  }

  function repr(v) {
    // The REPL view of a value: strings as JSON, everything else as inspect() shows it.
    let text;
    try {
      text = typeof v === 'string' ? JSON.stringify(v) : inspect(v);
    } catch (e) {
      text = `<unprintable ${typeof v}>`;
    }
    if (text.length > MAX_VALUE_CHARS) text = `${text.slice(0, MAX_VALUE_CHARS)}... <${text.length - MAX_VALUE_CHARS} more characters>`;
    return text;
  }

  function format(args) {
    let i = 0;
    let out = '';
    if (typeof args[0] === 'string' && args[0].includes('%') && args.length > 1) {
      const fmt = args[0];
      i = 1;
      out = fmt.replace(/%([sdifjoOc%])/g, (m, c) => {
        if (c === '%') return '%';
        if (i >= args.length) return m;
        const a = args[i++];
        switch (c) {
          case 's': return typeof a === 'string' ? a : inspect(a, 1);
          case 'd': case 'i': {
            if (typeof a === 'bigint') return `${a}n`;
            const n = Number(a);
            return String(c === 'i' ? Math.trunc(n) : n);
          }
          case 'f': return String(Number(a));
          case 'j': try { return JSON.stringify(a); } catch (e) { return '[Circular]'; }
          case 'c': return '';
          default: return inspect(a, 1);
        }
      });
    } else if (args.length > 0) {
      out = inspect(args[0]);
      i = 1;
    }
    for (; i < args.length; i++) out += ` ${inspect(args[i])}`;
    return out;
  }

  // ---------------------------------------------------------------- console

  let groupIndent = '';
  function emit(file, text) {
    if (groupIndent) text = groupIndent + text.replace(/\n/g, `\n${groupIndent}`);
    file.puts(`${text}\n`);
    file.flush();
  }
  const timers = new Map();
  const counts = new Map();
  const console = {
    log: (...a) => emit(std.out, format(a)),
    info: (...a) => emit(std.out, format(a)),
    debug: (...a) => emit(std.out, format(a)),
    error: (...a) => emit(std.err, format(a)),
    warn: (...a) => emit(std.err, format(a)),
    trace: (...a) => emit(std.err, `Trace: ${format(a)}\n${(new Error().stack || '').replace(/^.*\n/, '').replace(/\n$/, '')}`),
    dir: (v) => emit(std.out, inspect(v)),
    assert: (cond, ...a) => { if (!cond) emit(std.err, a.length ? `Assertion failed: ${format(a)}` : 'Assertion failed'); },
    group: (...a) => { if (a.length) emit(std.out, format(a)); groupIndent += '  '; },
    groupEnd: () => { groupIndent = groupIndent.slice(2); },
    time: (label = 'default') => { timers.set(label, Date.now()); },
    timeLog: (label = 'default', ...a) => {
      if (timers.has(label)) emit(std.out, [`${label}: ${Date.now() - timers.get(label)}ms`, ...a.map((x) => inspect(x))].join(' '));
    },
    timeEnd: (label = 'default') => {
      if (timers.has(label)) { emit(std.out, `${label}: ${Date.now() - timers.get(label)}ms`); timers.delete(label); }
    },
    count: (label = 'default') => { const n = (counts.get(label) || 0) + 1; counts.set(label, n); emit(std.out, `${label}: ${n}`); },
    countReset: (label = 'default') => { counts.delete(label); },
    table: (v) => emit(std.out, inspect(v)),
  };
  console.groupCollapsed = console.group;

  const define = (name, value) => Object.defineProperty(globalThis, name, {
    value, writable: true, configurable: true, enumerable: false,
  });
  define('console', console);

  // ---------------------------------------------------------------- timers

  define('setTimeout', (fn, ms = 0, ...args) => {
    if (typeof fn !== 'function') throw new TypeError('setTimeout: callback must be a function');
    return os.setTimeout(args.length ? () => fn(...args) : fn, Number(ms) || 0);
  });
  define('setInterval', (fn, ms = 0, ...args) => {
    if (typeof fn !== 'function') throw new TypeError('setInterval: callback must be a function');
    return os.setInterval(args.length ? () => fn(...args) : fn, Number(ms) || 0);
  });
  define('clearTimeout', (id) => { if (id !== undefined && id !== null) os.clearTimeout(id); });
  define('clearInterval', (id) => { if (id !== undefined && id !== null) os.clearInterval(id); });
  define('setImmediate', (fn, ...args) => os.setTimeout(() => fn(...args), 0));
  define('clearImmediate', (id) => { if (id !== undefined && id !== null) os.clearTimeout(id); });

  const noop = () => {};
  function nextTimerId() {
    const id = os.setTimeout(noop, 0);
    os.clearTimeout(id);
    return id;
  }

  // ---------------------------------------------------------------- per instance

  // Math.random is xoshiro128** seeded by the host: every instance of the snapshot
  // would otherwise repeat the sequence seeded when the snapshot was built.
  let s0 = 1, s1 = 2, s2 = 3, s3 = 4;
  const rotl = (x, k) => (x << k) | (x >>> (32 - k));
  function next32() {
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9);
    const t = s1 << 9;
    s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t; s3 = rotl(s3, 11);
    return result >>> 0;
  }
  Object.defineProperty(Math, 'random', {
    value: function random() {
      return ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992;
    },
    writable: true, configurable: true, enumerable: false,
  });
  // performance.now() counts from the instance's start, not from when the snapshot
  // was built (QuickJS's own `performance` has a fixed, non-configurable origin).
  let timeOrigin = 0;
  let clockOrigin = 0;
  const performance = Object.create(Object.getPrototypeOf(globalThis.performance || {}), {
    now: { value: function now() { return os.now() / 1000 - clockOrigin; }, enumerable: true },
    timeOrigin: { get: () => timeOrigin, enumerable: true },
    toJSON: { value: function toJSON() { return { timeOrigin }; } },
  });
  try { define('performance', performance); } catch (e) { /* keep QuickJS's */ }

  function startInstance(seed) {
    [s0, s1, s2, s3] = seed.map((x) => x | 0);
    if ((s0 | s1 | s2 | s3) === 0) s0 = 1;
    clockOrigin = os.now() / 1000;
    timeOrigin = Date.now();
    os.chdir(WORKSPACE);
  }

  // ---------------------------------------------------------------- stdin

  // A kernel's WASI stdin cannot change between calls, so there `std.in` (the object;
  // the module binding is read-only) gets own methods reading each call's stdin.
  let stdinBytes = ''; // a "binary string": one char per UTF-8 byte
  let stdinPos = 0;
  const utf8Encode = (s) => unescape(encodeURIComponent(s));
  const utf8Decode = (b) => {
    try { return decodeURIComponent(escape(b)); } catch (e) { return b; }
  };
  const stdinMethods = {
    getline() {
      if (stdinPos >= stdinBytes.length) return null;
      let end = stdinBytes.indexOf('\n', stdinPos);
      if (end < 0) end = stdinBytes.length;
      const line = stdinBytes.slice(stdinPos, end);
      stdinPos = end + 1;
      return utf8Decode(line);
    },
    readAsString(max) {
      const end = max === undefined ? stdinBytes.length : Math.min(stdinBytes.length, stdinPos + Number(max));
      const text = stdinBytes.slice(stdinPos, end);
      stdinPos = Math.max(stdinPos, end);
      return utf8Decode(text);
    },
    readAsArrayBuffer(max) {
      const end = max === undefined ? stdinBytes.length : Math.min(stdinBytes.length, stdinPos + Number(max));
      const out = new Uint8Array(Math.max(0, end - stdinPos));
      for (let i = 0; i < out.length; i++) out[i] = stdinBytes.charCodeAt(stdinPos + i);
      stdinPos += out.length;
      return out.buffer;
    },
    read(buffer, position = 0, length = buffer.byteLength - position) {
      const view = new Uint8Array(buffer, position, Math.max(0, Math.min(length, buffer.byteLength - position)));
      let n = 0;
      while (n < view.length && stdinPos < stdinBytes.length) view[n++] = stdinBytes.charCodeAt(stdinPos++);
      return n;
    },
    getByte() { return stdinPos < stdinBytes.length ? stdinBytes.charCodeAt(stdinPos++) : -1; },
    eof() { return stdinPos >= stdinBytes.length; },
    error() { return false; },
    clearerr() {},
    tell() { return stdinPos; },
    tello() { return BigInt(stdinPos); },
    seek(offset, whence) {
      const base = whence === std.SEEK_CUR ? stdinPos : whence === std.SEEK_END ? stdinBytes.length : 0;
      stdinPos = Math.max(0, Math.min(stdinBytes.length, base + Number(offset)));
      return 0;
    },
  };
  let stdinPatched = false;
  function setStdin(text) {
    if (!stdinPatched) {
      for (const [name, fn] of Object.entries(stdinMethods)) {
        Object.defineProperty(std.in, name, { value: fn, writable: true, configurable: true, enumerable: false });
      }
      stdinPatched = true;
    }
    stdinBytes = utf8Encode(text);
    stdinPos = 0;
  }

  // ---------------------------------------------------------------- turns

  let currentFilename = '<input>';
  let active = null; // the turn in progress: { idle(), uncaught(error) }

  // The host reports the loop idle by making HOST_FD readable; nothing is read from it.
  os.setReadHandler(HOST_FD, () => {
    if (active !== null) active.idle();
  });

  function applyEnv(env) {
    const current = std.getenviron();
    for (const k of Object.keys(current)) {
      if (!Object.prototype.hasOwnProperty.call(env, k)) std.unsetenv(k);
    }
    for (const [k, v] of Object.entries(env)) {
      if (current[k] !== v) std.setenv(k, v);
    }
  }

  const BUILTIN_SPECIFIER = /((?:\bfrom|\bimport)\s*\(?\s*)(['"])(std|os|bjson)\2/g;
  const withBuiltins = (code) => code.replace(BUILTIN_SPECIFIER, '$1$2qjs:$3$2');
  const MAYBE_MODULE = /\b(?:import|export)\b/;

  // Evaluate the code; resolves to { value } (scripts) or {} (modules).
  function evaluate(code) {
    code = withBuiltins(code);
    try {
      return std.evalScript(code, { async: true, backtrace_barrier: true });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !MAYBE_MODULE.test(code)) throw e;
    }
    // Not a script, and it mentions import/export: it is a module (like node's detection).
    const mod = std.evalScript(code, { compile_module: true, compile_only: true });
    return std.evalScript(mod, { eval_module: true }).then(() => ({}));
  }

  function describe(e) {
    if (e instanceof Error || (e !== null && typeof e === 'object' && 'message' in e && 'name' in e)) {
      let name;
      try { name = String(e.name || ctorName(e) || 'Error'); } catch (err) { name = 'Error'; }
      let message;
      try { message = String(e.message); } catch (err) { message = ''; }
      return { type: name, message, traceback: errorText(e) };
    }
    const shown = inspect(e, 1);
    return { type: e === null ? 'null' : typeof e, message: shown, traceback: `Uncaught ${shown}` };
  }

  const escapeRegExp = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

  // The innermost frame in the submitted code: its line number and text.
  function locate(error, code) {
    const m = new RegExp(`${escapeRegExp(currentFilename)}:(\\d+)`).exec(error.traceback);
    if (!m) return;
    const line = Number(m[1]);
    const text = code.split('\n')[line - 1];
    error.line = line;
    if (text !== undefined) error.source = text.trim();
  }

  function report(e, code, inPromise = false) {
    const error = describe(e);
    if (inPromise) error.traceback = `Uncaught (in promise) ${error.traceback.replace(/^Uncaught /, '')}`;
    if (e instanceof SyntaxError && typeof e.tsLine === 'number') {
      // The transpiler refused the program: its place, as a parser's error shows it.
      error.traceback = `${error.traceback}\n    at ${currentFilename}:${e.tsLine}:${e.tsColumn}`;
    }
    if (transpile !== null) {
      const more = transpile.explain(error.type, error.message, code);
      error.message += more;
      if (more) error.traceback = error.traceback.replace(/^([^\n]*)/, (first) => first + more);
    }
    locate(error, code);
    try { emit(std.err, error.traceback); } catch (err) { /* stderr is gone */ }
    return error;
  }

  async function turn(req) {
    if (req.seed) startInstance(req.seed);
    currentFilename = req.filename || '<input>';
    if (req.env) applyEnv(req.env);
    if (req.stdin !== undefined) setStdin(req.stdin);
    else std.in.clearerr();
    const firstTimer = nextTimerId();
    let finish;
    const finished = new Promise((resolve) => { finish = resolve; });
    let settled = false;
    let value;
    active = {
      idle: () => {
        if (unhandled.size > 0) {
          const [reason] = unhandled.values();
          finish({ error: reason, inPromise: true });
        } else {
          finish(settled ? { ok: true } : { unsettled: true });
        }
      },
      uncaught: (e) => finish({ error: e }),
    };
    try {
      Promise.resolve(evaluate(transpile === null ? req.code : transpile(req.code))).then((r) => {
        settled = true;
        value = r && r.value;
      }, (e) => finish({ error: e }));
    } catch (e) {
      finish({ error: e });
    }
    const end = await finished;
    active = null;
    const result = { exit_code: 0 };
    if (end.error !== undefined) {
      // Like an uncaught exception in node: the program ends, its pending timers do not run.
      const last = nextTimerId();
      for (let id = firstTimer; id < last && id - firstTimer < 1000000; id++) os.clearTimeout(id);
      result.exit_code = 1;
      result.error = report(end.error, req.code, end.inPromise);
    } else if (end.unsettled) {
      result.exit_code = 13;
      result.error = {
        type: 'UnsettledTopLevelAwait',
        message: 'the program awaited a promise that can never settle (no timers or I/O were left to settle it)',
        traceback: '',
      };
      emit(std.err, `Warning: ${result.error.message}`);
    } else if (req.value && value !== undefined) {
      result.value = repr(value);
    }
    unhandled.clear();
    try { std.out.flush(); std.err.flush(); } catch (e) { /* ignore */ }
    return JSON.stringify(result);
  }

  function onUncaught(e) {
    if (active !== null) active.uncaught(e);
    else report(e, '');
  }

  // Called by the host's promise rejection tracker: rejected promises without a
  // handler are an error of the turn once the program is idle (as in node).
  const unhandled = new Map();
  function onRejection(promise, reason, handled) {
    if (handled) unhandled.delete(promise);
    else unhandled.set(promise, reason);
  }

  Object.defineProperty(globalThis, '__wasm_runner', {
    value: Object.freeze({ turn, onUncaught, onRejection }),
    writable: false, configurable: false, enumerable: false,
  });
})();
