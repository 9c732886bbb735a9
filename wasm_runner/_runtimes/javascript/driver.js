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

  // ---------------------------------------------------------------- fetch

  // There are no sockets here: fetch() hands each request to the host, which checks the
  // run's network policy on the address it connects to, adds brokered credentials the
  // program never sees, verifies TLS, follows redirects (each one checked) and answers.
  // The channel is two host-only descriptors: a write of the request to HTTP_FD returns
  // the length of the answer, which a second write to HTTP_FD + 1 of a buffer that size
  // receives. Each message is a 4-byte little-endian length, a JSON head, then the body.
  // The call is synchronous underneath; fetch() still returns a promise.
  const HTTP_FD = config.http_fd;
  const bytesOfBinary = (s) => {
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  };
  const binaryOfBytes = (bytes) => {
    let s = '';
    for (let i = 0; i < bytes.length; i += 8192) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
    return s;
  };
  const encodeText = (s) => bytesOfBinary(unescape(encodeURIComponent(String(s))));
  const decodeText = (bytes) => {
    const binary = binaryOfBytes(bytes);
    try { return decodeURIComponent(escape(binary)); } catch (e) { return binary; }
  };

  class NetworkDenied extends TypeError {}
  Object.defineProperty(NetworkDenied.prototype, 'name', { value: 'NetworkDenied' });
  class NetworkLimitExceeded extends TypeError {}
  Object.defineProperty(NetworkLimitExceeded.prototype, 'name', { value: 'NetworkLimitExceeded' });

  function hostExchange(head, body) {
    const headBytes = encodeText(JSON.stringify(head));
    const payload = body || new Uint8Array(0);
    const message = new Uint8Array(4 + headBytes.length + payload.length);
    new DataView(message.buffer).setUint32(0, headBytes.length, true);
    message.set(headBytes, 4);
    message.set(payload, 4 + headBytes.length);
    const size = os.write(HTTP_FD, message.buffer, 0, message.length);
    if (!(size > 4)) return [null, null];
    const reply = new Uint8Array(size);
    os.write(HTTP_FD + 1, reply.buffer, 0, size);
    const headLength = new DataView(reply.buffer).getUint32(0, true);
    return [JSON.parse(decodeText(reply.subarray(4, 4 + headLength))), reply.subarray(4 + headLength)];
  }

  function hostCall(head, body) {
    const [answer, rest] = hostExchange(head, body);
    if (answer === null) throw new TypeError('fetch failed: the host did not answer');
    if (!answer.ok) {
      const error = answer.error || {};
      let text = error.message || 'the host refused the request';
      if (error.hint) text += ` (hint: ${error.hint})`;
      const Kind = error.kind === 'denied' ? NetworkDenied : error.kind === 'limit' ? NetworkLimitExceeded : TypeError;
      throw new Kind(Kind === TypeError ? `fetch failed: ${text}` : text);
    }
    return [answer, rest];
  }

  const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  class Headers {
    #list = [];
    constructor(init) {
      if (init === undefined || init === null) return;
      if (init instanceof Headers) {
        for (const [k, v] of init.#list) this.#list.push([k, v]);
      } else if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const entry = Array.from(pair);
          if (entry.length !== 2) throw new TypeError('Headers: each entry must be a [name, value] pair');
          this.append(entry[0], entry[1]);
        }
      } else if (typeof init === 'object') {
        for (const k of Object.keys(init)) this.append(k, init[k]);
      } else {
        throw new TypeError('Headers: expected an object, an iterable of pairs or Headers');
      }
    }
    static #name(name) {
      const n = String(name);
      if (!HEADER_NAME.test(n)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(n)}`);
      return n.toLowerCase();
    }
    static #value(value) {
      const v = String(value).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
      if (/[\0\r\n]/.test(v)) throw new TypeError('Headers: invalid header value');
      return v;
    }
    append(name, value) { this.#list.push([Headers.#name(name), Headers.#value(value)]); }
    set(name, value) {
      const n = Headers.#name(name);
      this.#list = this.#list.filter(([k]) => k !== n);
      this.#list.push([n, Headers.#value(value)]);
    }
    get(name) {
      const n = Headers.#name(name);
      const values = this.#list.filter(([k]) => k === n).map(([, v]) => v);
      return values.length ? values.join(', ') : null;
    }
    getSetCookie() { return this.#list.filter(([k]) => k === 'set-cookie').map(([, v]) => v); }
    has(name) { const n = Headers.#name(name); return this.#list.some(([k]) => k === n); }
    delete(name) { const n = Headers.#name(name); this.#list = this.#list.filter(([k]) => k !== n); }
    *entries() {
      const names = [...new Set(this.#list.map(([k]) => k))].sort();
      for (const n of names) {
        if (n === 'set-cookie') for (const v of this.getSetCookie()) yield [n, v];
        else yield [n, this.get(n)];
      }
    }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(callback, thisArg) { for (const [k, v] of this.entries()) callback.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return 'Headers'; }
    pairs() { return this.#list.map(([k, v]) => [k, v]); }
  }

  function bodyBytes(body, headers) {
    if (body === undefined || body === null) return null;
    if (typeof body === 'string') {
      if (!headers.has('content-type')) headers.set('content-type', 'text/plain;charset=UTF-8');
      return encodeText(body);
    }
    if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
    if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength));
    if (body instanceof Body) return body._bytes();
    throw new TypeError('fetch: a body must be a string, an ArrayBuffer or a typed array here');
  }

  class Body {
    #bytes;
    #used = false;
    constructor(bytes) { this.#bytes = bytes; }
    get bodyUsed() { return this.#used; }
    get body() { return this.#bytes === null ? null : { locked: this.#used }; }
    _bytes() {
      if (this.#used) throw new TypeError('Body has already been consumed');
      this.#used = true;
      return this.#bytes === null ? new Uint8Array(0) : this.#bytes;
    }
    _peek() { return this.#bytes; }
    async arrayBuffer() { const b = this._bytes(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
    async bytes() { return new Uint8Array(await this.arrayBuffer()); }
    async text() { return decodeText(this._bytes()); }
    async json() { return JSON.parse(await this.text()); }
  }

  const METHODS = /^(DELETE|GET|HEAD|OPTIONS|POST|PUT|PATCH)$/i;
  class Request extends Body {
    #url; #method; #headers; #redirect;
    constructor(input, init = {}) {
      const from = input instanceof Request ? input : null;
      const headers = new Headers(init.headers !== undefined ? init.headers : from ? from.headers : undefined);
      let method = init.method !== undefined ? String(init.method) : from ? from.method : 'GET';
      if (METHODS.test(method)) method = method.toUpperCase();
      let body = init.body !== undefined ? bodyBytes(init.body, headers) : from ? from._peek() : null;
      if (body !== null && (method === 'GET' || method === 'HEAD')) {
        throw new TypeError('Request with GET/HEAD method cannot have body');
      }
      super(body);
      this.#url = from && input === from ? from.url : String(input);
      this.#method = method;
      this.#headers = headers;
      this.#redirect = init.redirect || (from ? from.redirect : 'follow');
      if (!['follow', 'manual', 'error'].includes(this.#redirect)) throw new TypeError(`Request: bad redirect ${this.#redirect}`);
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#headers; }
    get redirect() { return this.#redirect; }
    clone() { return new Request(this); }
    get [Symbol.toStringTag]() { return 'Request'; }
  }

  class Response extends Body {
    #status; #statusText; #headers; #url; #redirected; #type;
    constructor(body = null, init = {}) {
      const headers = new Headers(init.headers);
      super(body === null ? null : bodyBytes(body, headers));
      this.#status = init.status === undefined ? 200 : Number(init.status);
      if (!(this.#status >= 200 && this.#status <= 599) && !init._host) throw new RangeError(`Response: status ${this.#status}`);
      this.#statusText = init.statusText === undefined ? '' : String(init.statusText);
      this.#headers = headers;
      this.#url = init._url || '';
      this.#redirected = !!init._redirected;
      this.#type = init._host ? 'basic' : 'default';
    }
    get status() { return this.#status; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get statusText() { return this.#statusText; }
    get headers() { return this.#headers; }
    get url() { return this.#url; }
    get redirected() { return this.#redirected; }
    get type() { return this.#type; }
    clone() {
      if (this.bodyUsed) throw new TypeError('Response.clone: Body has already been consumed');
      return new Response(this._peek(), { status: this.#status, statusText: this.#statusText, headers: this.#headers,
        _url: this.#url, _redirected: this.#redirected, _host: this.#type === 'basic' });
    }
    static json(data, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has('content-type')) headers.set('content-type', 'application/json');
      return new Response(JSON.stringify(data), { ...init, headers });
    }
    static error() { return new Response(null, { status: 0, _host: true }); }
    get [Symbol.toStringTag]() { return 'Response'; }
  }

  function fetchNow(input, init) {
    const request = new Request(input, init);
    if (!/^https?:\/\//i.test(request.url)) {
      throw new TypeError(`fetch: ${JSON.stringify(request.url)} is not an absolute http(s) URL`);
    }
    const [answer, first] = hostCall({
      op: 'request', method: request.method, url: request.url, headers: request.headers.pairs(),
      follow: request.redirect === 'follow',
    }, request._peek());
    const chunks = [first];
    let total = first.length;
    let eof = answer.eof;
    while (!eof) {
      const [more, data] = hostCall({ op: 'read', handle: answer.handle, size: 1 << 20 });
      chunks.push(data);
      total += data.length;
      eof = more.eof;
    }
    let body = chunks[0];
    if (chunks.length > 1) {
      body = new Uint8Array(total);
      let at = 0;
      for (const c of chunks) { body.set(c, at); at += c.length; }
    }
    if (request.redirect === 'error' && answer.status >= 300 && answer.status < 400) {
      throw new TypeError(`fetch failed: ${request.url} redirected (redirect: "error")`);
    }
    const nullBody = request.method === 'HEAD' || [101, 204, 205, 304].includes(answer.status);
    return new Response(nullBody ? null : body, { status: answer.status, statusText: answer.reason,
      headers: answer.headers, _url: answer.url, _redirected: answer.redirected, _host: true });
  }

  define('Headers', Headers);
  define('Request', Request);
  define('Response', Response);
  define('fetch', async function fetch(input, init) { return fetchNow(input, init); });

  // ---------------------------------------------------------------- tools (code mode)

  // `await tools.searchIssues({query: "x"})`: the call goes to the host on the same channel as
  // fetch (a head whose op is "tool"), which decides it (allowlist, budget, schema, timeout) and
  // answers with the tool's JSON result or a refusal, thrown here as a ToolError.
  class ToolError extends Error {
    constructor(message, kind) { super(message); this.kind = kind || 'tool_error'; }
  }
  Object.defineProperty(ToolError.prototype, 'name', { value: 'ToolError' });
  // This turn's tools by name ({name: schema}), asked of the host at the turn's first call.
  let runTools = null;
  function toolSchema(name) {
    if (runTools === null) {
      runTools = Object.create(null);
      const [answer] = hostExchange({ op: 'tool', describe: true });
      for (const spec of (answer && answer.ok && answer.value) || []) runTools[spec.name] = spec.parameters || {};
    }
    const snake = name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
    return runTools[name] || runTools[snake];
  }

  const isPrimitive = (v) => v === null || typeof v !== 'object';
  function jsonType(v, kind) {
    switch (kind) {
      case 'integer': return Number.isInteger(v);
      case 'number': return typeof v === 'number';
      case 'string': return typeof v === 'string';
      case 'boolean': return typeof v === 'boolean';
      case 'null': return v === null;
      case 'array': return Array.isArray(v);
      case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
      default: return true;
    }
  }
  // How `value` breaks `schema`, or null: a subset of JSON Schema (types, required, properties,
  // enum, const, items, sizes, bounds, anyOf/allOf). A keyword not known here passes: the host
  // checks the whole schema again, so this check is never stricter than the host's.
  function schemaError(schema, value, where) {
    if (schema === null || typeof schema !== 'object' || Array.isArray(schema) || '$ref' in schema) return null;
    const at = where ? where + ': ' : '';
    const shown = JSON.stringify(typeof value === 'string' ? value.slice(0, 60) : value).slice(0, 80);
    const under = (key) => (where ? where + '/' + key : String(key));
    if (schema.type !== undefined) {
      const kinds = Array.isArray(schema.type) ? schema.type : [schema.type];
      if (!kinds.some((k) => jsonType(value, k))) {
        return `${at}${shown} is not of type ${kinds.map((k) => JSON.stringify(k)).join(' or ')}`;
      }
    }
    if (Array.isArray(schema.enum) && schema.enum.every(isPrimitive) && !schema.enum.includes(value)) {
      return `${at}${shown} is not one of ${JSON.stringify(schema.enum).slice(0, 120)}`;
    }
    if ('const' in schema && isPrimitive(schema.const) && value !== schema.const) {
      return `${at}${JSON.stringify(schema.const).slice(0, 80)} was expected`;
    }
    if (jsonType(value, 'object')) {
      const properties = (schema.properties && typeof schema.properties === 'object') ? schema.properties : {};
      for (const key of Array.isArray(schema.required) ? schema.required : []) {
        if (!(key in value)) return `${at}"${key}" is a required property`;
      }
      const extra = 'patternProperties' in schema ? true : schema.additionalProperties;
      for (const [key, item] of Object.entries(value)) {
        const problem = Object.prototype.hasOwnProperty.call(properties, key)
          ? schemaError(properties[key], item, under(key))
          : extra === false ? `${at}Additional properties are not allowed (${JSON.stringify(key)} was unexpected)`
            : schemaError(extra, item, under(key));
        if (problem) return problem;
      }
    }
    if (Array.isArray(value)) {
      if (Number.isInteger(schema.minItems) && value.length < schema.minItems) return `${at}the array breaks minItems: ${schema.minItems}`;
      if (Number.isInteger(schema.maxItems) && value.length > schema.maxItems) return `${at}the array breaks maxItems: ${schema.maxItems}`;
      if (!('prefixItems' in schema)) {
        for (let i = 0; i < value.length; i++) {
          const problem = schemaError(schema.items, value[i], under(i));
          if (problem) return problem;
        }
      }
    }
    if (typeof value === 'string') {
      const length = [...value].length; // code points, as JSON Schema counts
      if (Number.isInteger(schema.minLength) && length < schema.minLength) return `${at}${shown} breaks minLength: ${schema.minLength}`;
      if (Number.isInteger(schema.maxLength) && length > schema.maxLength) return `${at}${shown} breaks maxLength: ${schema.maxLength}`;
    }
    if (typeof value === 'number') {
      const bounds = [['minimum', (n) => value < n], ['maximum', (n) => value > n],
        ['exclusiveMinimum', (n) => value <= n], ['exclusiveMaximum', (n) => value >= n]];
      for (const [bound, breaks] of bounds) {
        if (typeof schema[bound] === 'number' && breaks(schema[bound])) return `${at}${shown} breaks ${bound}: ${schema[bound]}`;
      }
    }
    if (Array.isArray(schema.anyOf) && schema.anyOf.length && schema.anyOf.every((o) => schemaError(o, value, where))) {
      return `${at}${shown} matches none of the allowed forms`;
    }
    for (const part of Array.isArray(schema.allOf) ? schema.allOf : []) {
      const problem = schemaError(part, value, where);
      if (problem) return problem;
    }
    return null;
  }

  function callTool(name, args) {
    let head;
    try {
      head = { op: 'tool', name, kwargs: args === undefined ? {} : JSON.parse(JSON.stringify(args)) };
    } catch (e) {
      throw new ToolError(`${name}(): arguments must be JSON values: ${e.message}`, 'invalid_arguments');
    }
    if (head.kwargs === null || typeof head.kwargs !== 'object' || Array.isArray(head.kwargs)) {
      throw new ToolError(`${name}() takes one object of named arguments, e.g. {query: "x"}`, 'invalid_arguments');
    }
    // Checked here first (a wrong call fails at once); a name the run lacks goes on, to be refused and recorded.
    const schema = toolSchema(name);
    const problem = schema === undefined ? null : schemaError(schema, head.kwargs, '');
    if (problem) throw new ToolError(`${name}(): ${problem}`, 'invalid_arguments');
    const [answer] = hostExchange(head);
    if (answer === null) throw new ToolError(`${name}(): the host did not answer`);
    if (!answer.ok) {
      const error = answer.error || {};
      throw new ToolError(error.message || 'the host refused the call', error.kind);
    }
    return answer.value === undefined ? null : answer.value;
  }
  const tools = new Proxy(Object.create(null), {
    get(target, name) {
      if (typeof name !== 'string' || name === 'then') return undefined;
      return async (args) => callTool(name, args);
    },
  });
  define('ToolError', ToolError);
  define('tools', tools);

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
    if (req.cwd) os.chdir(req.cwd);  // the session's working directory (under /workspace)
    runTools = null;
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
