// wasm-runner TypeScript prelude, evaluated before driver.js when the host builds the
// TypeScript snapshot. The host wraps it as `((SOURCES) => { <this file> })({...})`, where
// SOURCES maps each CommonJS file of the pinned sucrase package (`dist/`, by its path) to a
// function(exports, require, module) holding that file's code.
//
// It leaves one global, `__wasm_runner_transpile(code)`, which the driver takes (and
// deletes) at start-up: TypeScript in, JavaScript out, on the same lines (sucrase removes
// types in place), so runtime errors carry the TypeScript source's line numbers.
'use strict';

// Packages sucrase requires only for options validation, source maps and token dumps,
// none of which the transform below uses (its options are fixed here). The options schema
// is built with ts-interface-checker's combinators at load time: they all accept anything.
const anyType = new Proxy(function anyType() {}, { get: () => anyType, apply: () => anyType });
const STUBS = {
  'ts-interface-checker': new Proxy({}, {
    get: (target, name) => (name === 'createCheckers' ? () => ({ Options: { strictCheck() {} } }) : anyType),
  }),
  '@jridgewell/gen-mapping': {},
  'lines-and-columns': {},
};

const cache = new Map();

function resolve(from, spec) {
  const parts = from.split('/').slice(0, -1);
  for (const part of spec.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.' && part !== '') parts.push(part);
  }
  const base = parts.join('/');
  for (const candidate of [base, `${base}.js`, `${base}/index.js`]) {
    if (Object.prototype.hasOwnProperty.call(SOURCES, candidate)) return candidate;
  }
  throw new Error(`sucrase: cannot find ${spec} from ${from}`);
}

function load(path) {
  const cached = cache.get(path);
  if (cached !== undefined) return cached.exports;
  const module = { exports: {} };
  cache.set(path, module);
  const require = (spec) => {
    if (spec.startsWith('.')) return load(resolve(path, spec));
    if (Object.prototype.hasOwnProperty.call(STUBS, spec)) return STUBS[spec];
    throw new Error(`sucrase: no package ${spec} in the sandbox`);
  };
  SOURCES[path](module.exports, require, module);
  return module.exports;
}

const sucrase = load('index.js');
const OPTIONS = Object.freeze({
  transforms: ['typescript'],
  disableESTransforms: true, // QuickJS runs modern syntax as it is
  preserveDynamicImport: true,
});

// Sucrase reports a syntax error's place as `message (line:column)` and `loc`.
function transpile(code) {
  try {
    return sucrase.transform(code, OPTIONS).code;
  } catch (e) {
    if (e instanceof SyntaxError && e.loc) {
      const error = new SyntaxError(e.message.replace(/ \(\d+:\d+\)$/, ''));
      error.tsLine = e.loc.line;
      error.tsColumn = e.loc.column;
      throw error;
    }
    throw e;
  }
}

// What a failure means when it comes from what the in-sandbox transform cannot do: sucrase
// erases namespaces (it reads them as types) and passes decorators through to QuickJS, which
// has none. Returns text to append to the error's message, or ''.
transpile.explain = (type, message, code) => {
  const missing = type === 'ReferenceError' && /^(\S+) is not defined$/.exec(message);
  if (missing && new RegExp(`\\b(?:namespace|module)\\s+${missing[1].replace(/[$]/g, '\\$')}\\s*[{.]`).test(code)) {
    return ' (TypeScript namespaces with values are not supported in WebAssembly: the transpiler, sucrase, '
      + 'erases them; use an object or a module, or the typescript-native profile)';
  }
  if (type === 'SyntaxError' && /'@'/.test(message)) {
    return ' (decorators are not supported in WebAssembly: QuickJS has none and the transpiler, sucrase, '
      + 'keeps them; use the bun profile)';
  }
  return '';
};

// Warm the transform up once here, inside the snapshot, so that the lazily built parts of
// sucrase (its tables and the interpreter's shapes) are made before any program's turn.
transpile('interface I { a: number }\nenum E { A }\nconst x: I = { a: E.A };\nexport { x };\n');

Object.defineProperty(globalThis, '__wasm_runner_transpile', {
  value: transpile, writable: false, configurable: true, enumerable: false,
});
