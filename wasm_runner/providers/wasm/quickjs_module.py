"""Rewriting the QuickJS reactor module: exports, helper functions, snapshots.

The pinned `qjs-wasi-reactor.wasm` exports too little to evaluate code twice or to
run the event loop. `derive_module` exports a few of QuickJS's own functions (found
by the name section, signatures checked) and adds small helper functions;
`snapshot_module` turns a started instance's memory and globals into a module whose
data is that state (like Wizer), so instances start pre-initialised.
"""

from __future__ import annotations

import re

# ----------------------------------------------------------------------------
# Deriving the module.

EXPORTED_FUNCTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "JS_Eval": (("i32", "i32", "i32", "i32", "i32"), ("i64",)),
    "js_std_await": (("i32", "i64"), ("i64",)),
    "JS_FreeValue": (("i32", "i64"), ()),
    "JS_ToCStringLen2": (("i32", "i32", "i64", "i32"), ("i32",)),
    "JS_FreeCString": (("i32", "i32"), ()),
    "JS_GetException": (("i32",), ("i64",)),
    "JS_Call": (("i32", "i64", "i64", "i32", "i32"), ("i64",)),
    "JS_GetRuntime": (("i32",), ("i32",)),
    "js_std_dump_error": (("i32",), ()),
    "JS_SetHostPromiseRejectionTracker": (("i32", "i32", "i32"), ()),
}
"""QuickJS functions present (by name section) in the pinned artifact and exported by the derived module."""

USED_FUNCTIONS = {
    "JS_ExecutePendingJob": (("i32", "i32"), ("i32",)),
    "js_std_promise_rejection_tracker": (("i32", "i64", "i64", "i32", "i32"), ()),
}
"""Functions the added code calls or borrows a type from."""

STACK_POINTER = "__stack_pointer"
"""Global 0, also exported: its value is part of a snapshot."""
HOOKS = "wasm_runner_hooks"
"""Added global (exported): address of the driver's hooks, see `HOOKS_SIZE`."""
STDIO_WRITE = 0x40000000
"""Flag in poll_oneoff's subscription count: the call is a write to stdout/stderr (see `derive_module`)."""
HTTP_FD = 1_000_001
"""Host-only descriptors of the driver's HTTP requests: a write to HTTP_FD is a request (its
result, the answer's length), a write to HTTP_FD + 1 is filled with that answer (see the driver's fetch)."""
HOOKS_SIZE = 40
"""[0] JSValue onUncaught(error), [8] JSValue onRejection(promise, reason, handled), [16] room for 3 arguments."""

JS_TAG_BOOL, JS_TAG_UNDEFINED, JS_TAG_UNINITIALIZED, JS_TAG_EXCEPTION = 1, 3, 4, 6
JS_UNDEFINED = JS_TAG_UNDEFINED << 32

DERIVE_VERSION = "5"
"""Bump when `derive_module` changes (it is part of the snapshot's cache key)."""

_VALTYPES = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64"}


def _leb(data: bytes | bytearray, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i


def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _uleb_padded(value: int, width: int) -> bytes:
    """`value` as LEB128 in exactly `width` bytes (a redundant encoding is valid)."""
    out = bytearray()
    for i in range(width):
        out.append((value & 0x7F) | (0x80 if i < width - 1 else 0))
        value >>= 7
    if value:
        raise ValueError("value too large for its place")
    return bytes(out)


def _sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _name(data: bytes, i: int) -> tuple[str, int]:
    n, i = _leb(data, i)
    return data[i:i + n].decode("utf-8"), i + n


def _sections(module: bytes) -> list[tuple[int, bytes]]:
    if module[:8] != b"\0asm\x01\0\0\0":
        raise ValueError("not a WebAssembly module")
    sections: list[tuple[int, bytes]] = []
    i = 8
    while i < len(module):
        sid = module[i]
        size, j = _leb(module, i + 1)
        sections.append((sid, module[j:j + size]))
        i = j + size
    return sections


def _assemble(sections: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(b"\0asm\x01\0\0\0")
    for sid, body in sections:
        out.append(sid)
        out += _uleb(len(body))
        out += body
    return bytes(out)


def _calls(code: bytes, start: int) -> list[tuple[int, int, int]]:
    """The `call` instructions of a function body's code: (callee, immediate start, end).

    Decodes instruction by instruction (MVP, sign-extension, bulk-memory and
    saturating conversions); anything else raises rather than guessing.
    """
    calls = []
    i = start
    while i < len(code):
        op = code[i]
        i += 1
        if op in (0x02, 0x03, 0x04):  # block, loop, if: a block type
            if code[i] == 0x40 or code[i] in _VALTYPES:
                i += 1
            else:
                _, i = _leb(code, i)
        elif op in (0x0C, 0x0D, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0xD2):
            _, i = _leb(code, i)
        elif op == 0x0E:  # br_table
            n, i = _leb(code, i)
            for _ in range(n + 1):
                _, i = _leb(code, i)
        elif op == 0x10:
            callee, end = _leb(code, i)
            calls.append((callee, i, end))
            i = end
        elif op == 0x11:  # call_indirect: type, table
            _, i = _leb(code, i)
            _, i = _leb(code, i)
        elif 0x28 <= op <= 0x3E:  # loads and stores: align, offset
            align, i = _leb(code, i)
            if align & 0x40:
                _, i = _leb(code, i)
            _, i = _leb(code, i)
        elif op in (0x3F, 0x40):  # memory.size, memory.grow
            _, i = _leb(code, i)
        elif op in (0x41, 0x42):
            _, i = _leb(code, i)  # (signed, but only its length matters)
        elif op == 0x43:
            i += 4
        elif op == 0x44:
            i += 8
        elif op == 0x1C:  # select with types
            n, i = _leb(code, i)
            i += n
        elif op == 0xD0:
            i += 1
        elif op == 0xFC:
            sub, i = _leb(code, i)
            immediates = {8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1}.get(sub, 0)
            if sub > 17:
                raise ValueError(f"unknown instruction 0xfc {sub}")
            for _ in range(immediates):
                _, i = _leb(code, i)
        elif op in (0x00, 0x01, 0x05, 0x0B, 0x0F, 0x1A, 0x1B, 0xD1) or 0x45 <= op <= 0xC4:
            pass
        else:
            raise ValueError(f"unknown instruction {op:#x}")
    return calls


def derive_module(original: bytes) -> tuple[bytes, dict[str, int]]:
    """The pinned QuickJS reactor, made drivable by the host. Returns it and where things are:
    `tracker_slot` (function table) and `hooks_global`.

    - `EXPORTED_FUNCTIONS` are exported, and the stack pointer global.
    - A global `HOOKS` (exported) points to the driver's hooks.
    - `report(ctx)` (added) passes the pending exception to the driver's onUncaught.
    - `drain(rt, pctx)` (added) runs every pending job, reporting those that throw.
      `js_std_await` (QuickJS's event loop) calls it instead of `JS_ExecutePendingJob`,
      so that all promise jobs run before the next timer (QuickJS runs one job, then
      one due timer or a blocking wait).
    - `tracker(...)` (added, in a new function-table slot) is a promise rejection
      tracker calling the driver's onRejection.
    - `stdio_write(...)` (added) replaces every call of the `fd_write` import: writes
      to descriptors 1 and 2 (and the host's HTTP descriptors, `HTTP_FD`) become calls of the `poll_oneoff` import (which the host
      implements) flagged with `STDIO_WRITE`, so output reaches the call's capture
      synchronously on the guest's thread; other writes go to WASI's `fd_write`.

    Function indices come from the module's name section and every signature is
    checked, so a different artifact fails here instead of misbehaving later.
    """
    sections = _sections(original)
    types: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    func_types: list[int] = []
    imported = 0
    imports: dict[str, int] = {}
    names: dict[str, int] = {}
    global_names: dict[int, str] = {}
    globals_count = 0
    for sid, body in sections:
        if sid == 1:
            count, k = _leb(body, 0)
            for _ in range(count):
                if body[k] != 0x60:
                    raise ValueError("unexpected type")
                k += 1
                n, k = _leb(body, k)
                params = tuple(_VALTYPES[b] for b in body[k:k + n])
                k += n
                n, k = _leb(body, k)
                results = tuple(_VALTYPES[b] for b in body[k:k + n])
                k += n
                types.append((params, results))
        elif sid == 2:
            count, k = _leb(body, 0)
            for _ in range(count):
                module_name, k = _name(body, k)
                import_name, k = _name(body, k)
                if body[k] != 0:
                    raise ValueError("unexpected non-function import")
                t, k = _leb(body, k + 1)
                imports[f"{module_name}.{import_name}"] = len(func_types)
                func_types.append(t)
                imported += 1
        elif sid == 3:
            count, k = _leb(body, 0)
            for _ in range(count):
                t, k = _leb(body, k)
                func_types.append(t)
        elif sid == 6:
            globals_count, _ = _leb(body, 0)
        elif sid == 0:
            section_name, k = _name(body, 0)
            if section_name == "name":
                while k < len(body):
                    sub = body[k]
                    size, k = _leb(body, k + 1)
                    end = k + size
                    if sub in (1, 7):
                        count, m = _leb(body, k)
                        for _ in range(count):
                            index, m = _leb(body, m)
                            fname, m = _name(body, m)
                            if sub == 1:
                                names.setdefault(fname, index)
                            else:
                                global_names[index] = fname
                    k = end

    def function(fname: str, signature: tuple[tuple[str, ...], tuple[str, ...]]) -> int:
        index = names.get(fname)
        if index is None or types[func_types[index]] != signature:
            raise ValueError(f"the QuickJS module has no function {fname}{signature}")
        return index

    exports = [(fname, function(fname, sig)) for fname, sig in EXPORTED_FUNCTIONS.items()]
    f = {fname: function(fname, sig) for fname, sig in {**EXPORTED_FUNCTIONS, **USED_FUNCTIONS}.items()}
    if global_names.get(0) != STACK_POINTER:
        raise ValueError("the QuickJS module's global 0 is not its stack pointer")
    fd_write = imports.get("wasi_snapshot_preview1.fd_write")
    poll_oneoff = imports.get("wasi_snapshot_preview1.poll_oneoff")
    if fd_write is None or poll_oneoff is None or func_types[fd_write] != func_types[poll_oneoff]:
        raise ValueError("the QuickJS module does not import fd_write and poll_oneoff as expected")
    hooks = globals_count  # the added global's index
    report, drain, tracker, stdio_write = (len(func_types) + i for i in range(4))
    call = {name: b"\x10" + _uleb(index) for name, index in f.items()}
    undefined = b"\x42" + _sleb(JS_UNDEFINED)
    get_hooks = b"\x23" + _uleb(hooks)

    report_code = (  # (ctx) locals: 1 exc i64, 2 hooks i32
        b"\x02\x01\x7e\x01\x7f"
        + get_hooks + b"\x22\x02\x45\x04\x40"  # no hooks yet: print it like QuickJS does
        + b"\x20\x00" + call["js_std_dump_error"] + b"\x0f\x0b"
        + b"\x20\x00" + call["JS_GetException"] + b"\x21\x01"
        + b"\x20\x02\x20\x01\x37\x03\x10"  # hooks[16] = exc
        + b"\x20\x00"  # (ctx for JS_FreeValue)
        + b"\x20\x00\x20\x02\x29\x03\x00" + undefined  # onUncaught, this
        + b"\x41\x01\x20\x02\x41\x10\x6a" + call["JS_Call"]  # 1 argument at hooks + 16
        + call["JS_FreeValue"]
        + b"\x20\x00\x20\x01" + call["JS_FreeValue"]
        + b"\x0b"
    )
    drain_code = (  # (rt, pctx) -> count; locals: 2 count, 3 result
        b"\x01\x02\x7f"
        b"\x02\x40\x03\x40"  # block; loop
        b"\x20\x00\x20\x01" + call["JS_ExecutePendingJob"] + b"\x22\x03"
        b"\x45\x0d\x01"  # none left: leave the block
        b"\x20\x03\x41\x00\x48\x04\x40"  # it threw: report it
        b"\x20\x01\x28\x02\x00\x10" + _uleb(report) + b"\x0b"
        b"\x20\x02\x41\x01\x6a\x21\x02"  # count += 1
        b"\x0c\x00"  # next job
        b"\x0b\x0b"  # end loop; end block
        b"\x20\x02\x0b"
    )
    tracker_code = (  # (ctx, promise, reason, is_handled, opaque); local 5: hooks
        b"\x01\x01\x7f"
        + get_hooks + b"\x22\x05\x45\x04\x40\x0f\x0b"
        + b"\x20\x05\x20\x01\x37\x03\x10"  # hooks[16] = promise
        + b"\x20\x05\x20\x02\x37\x03\x18"  # hooks[24] = reason
        + b"\x20\x05\x20\x03\xad\x42" + _sleb(JS_TAG_BOOL << 32) + b"\x84\x37\x03\x20"  # hooks[32] = is_handled
        + b"\x20\x00"  # (ctx for JS_FreeValue)
        + b"\x20\x00\x20\x05\x29\x03\x08" + undefined  # onRejection, this
        + b"\x41\x03\x20\x05\x41\x10\x6a" + call["JS_Call"]  # 3 arguments at hooks + 16
        + call["JS_FreeValue"]
        + b"\x0b"
    )
    stdio_write_code = (  # (fd, iovs, iovs_len, nwritten) -> errno
        b"\x00"
        b"\x20\x00\x41\x01\x46\x20\x00\x41\x02\x46\x72"  # fd == 1 || fd == 2
        b"\x20\x00\x41" + _sleb(HTTP_FD) + b"\x6b\x41\x02\x49\x72"  # || fd - HTTP_FD <u 2
        b"\x04\x7f"
        b"\x20\x01\x20\x00\x20\x02\x41" + _sleb(STDIO_WRITE) + b"\x72\x20\x03"
        b"\x10" + _uleb(poll_oneoff) +  # the host's poll_oneoff(iovs, fd, STDIO_WRITE | iovs_len, nwritten)
        b"\x05"
        b"\x20\x00\x20\x01\x20\x02\x20\x03\x10" + _uleb(fd_write) +
        b"\x0b\x0b"
    )
    added_types = [
        func_types[f["js_std_dump_error"]],  # (i32) -> ()
        func_types[f["JS_ExecutePendingJob"]],  # (i32, i32) -> i32
        func_types[f["js_std_promise_rejection_tracker"]],
        func_types[fd_write],
    ]
    added_code = [report_code, drain_code, tracker_code, stdio_write_code]

    out: list[tuple[int, bytes]] = []
    tracker_slot = -1
    patched_await = False
    patched_writes = 0
    for sid, body in sections:
        if sid == 0:
            section_name, _ = _name(body, 0)
            if section_name.startswith(".debug"):
                continue  # the code section changes size: DWARF offsets would be stale
        if sid == 3:
            count, k = _leb(body, 0)
            body = _uleb(count + len(added_types)) + body[k:] + b"".join(_uleb(t) for t in added_types)
        elif sid == 4:  # the function table gets a slot for the tracker
            count, k = _leb(body, 0)
            if count != 1 or body[k] != 0x70 or body[k + 1] not in (0, 1):
                raise ValueError("unexpected table section")
            flags = body[k + 1]
            tracker_slot, m = _leb(body, k + 2)
            limits = _uleb(tracker_slot + 1)
            if flags:
                maximum, m = _leb(body, m)
                limits += _uleb(max(maximum, tracker_slot + 1))
            body = b"\x01\x70" + bytes([flags]) + limits + body[m:]
        elif sid == 6:
            count, k = _leb(body, 0)
            body = _uleb(count + 1) + body[k:] + b"\x7f\x01\x41\x00\x0b"
        elif sid == 7:
            count, k = _leb(body, 0)
            entries = [(n, 0, index) for n, index in exports] + [(STACK_POINTER, 3, 0), (HOOKS, 3, hooks)]
            extra = b"".join(_uleb(len(n)) + n.encode() + bytes([kind]) + _uleb(index) for n, kind, index in entries)
            body = _uleb(count + len(entries)) + body[k:] + extra
        elif sid == 9:
            if tracker_slot < 0:
                raise ValueError("no table before the element section")
            count, k = _leb(body, 0)
            body = _uleb(count + 1) + body[k:] + b"\x00\x41" + _sleb(tracker_slot) + b"\x0b\x01" + _uleb(tracker)
        elif sid == 10:
            count, k = _leb(body, 0)
            code = bytearray(body)
            for index in range(imported, imported + count):
                size, start = _leb(code, k)
                locals_count, m = _leb(code, start)
                for _ in range(locals_count):
                    _, m = _leb(code, m)
                    m += 1
                # Calls are redirected in place (same immediate length: nothing moves).
                for callee, at, end in _calls(bytes(code[:start + size]), m):
                    if callee == fd_write:
                        code[at:end] = _uleb_padded(stdio_write, end - at)
                        patched_writes += 1
                    elif callee == f["JS_ExecutePendingJob"] and index == f["js_std_await"]:
                        code[at:end] = _uleb_padded(drain, end - at)
                        patched_await = True
                k = start + size
            body = (_uleb(count + len(added_code)) + bytes(code[_leb(code, 0)[1]:])
                    + b"".join(_uleb(len(c)) + c for c in added_code))
        out.append((sid, body))
    if tracker_slot < 0 or not patched_await or not patched_writes:
        raise ValueError("the QuickJS module does not have the expected table, event loop or writes")
    return _assemble(out), {"tracker_slot": tracker_slot, "hooks_global": hooks}


def snapshot_module(derived: bytes, memory: bytes, mutable_globals: dict[int, int]) -> bytes:
    """`derived` pre-initialised (like Wizer): its memory image and global values after start-up.

    The memory becomes the module's data (non-zero runs only) and its initial size;
    `_initialize` is no longer exported. Instantiating it with copy-on-write memory
    is about as fast as instantiating an empty module.
    """
    pages = len(memory) // 65536
    out: list[tuple[int, bytes]] = []
    for sid, body in _sections(derived):
        if sid == 5:  # memory: one memory, new minimum
            count, k = _leb(body, 0)
            flags = body[k]
            _, m = _leb(body, k + 1)
            if count != 1 or flags not in (0, 1):
                raise ValueError("unexpected memory section")
            body = b"\x01" + bytes([flags]) + _uleb(pages) + body[m:]
        elif sid == 6:  # globals: the mutable i32 ones get their current values
            count, k = _leb(body, 0)
            rebuilt = bytearray(_uleb(count))
            for index in range(count):
                start = k
                valtype, mutable = body[k], body[k + 1]
                k += 2
                if body[k] not in (0x41, 0x42, 0x23):
                    raise ValueError("unexpected global initialiser")
                _, k = _leb(body, k + 1)
                if body[k] != 0x0B:
                    raise ValueError("unexpected global initialiser")
                k += 1
                if index in mutable_globals:
                    if (valtype, mutable) != (0x7F, 1):
                        raise ValueError(f"global {index} is not a mutable i32")
                    value = mutable_globals[index]
                    rebuilt += b"\x7f\x01\x41" + _sleb(value - 2**32 if value >= 2**31 else value) + b"\x0b"
                else:
                    rebuilt += body[start:k]
            body = bytes(rebuilt)
        elif sid == 7:  # exports: no `_initialize`
            count, k = _leb(body, 0)
            kept = []
            for _ in range(count):
                start = k
                export_name, k = _name(body, k)
                k += 1
                _, k = _leb(body, k)
                if export_name != "_initialize":
                    kept.append(body[start:k])
            body = _uleb(len(kept)) + b"".join(kept)
        elif sid == 11:  # data: the memory image
            runs: list[tuple[int, int]] = []
            for match in re.finditer(rb"[^\x00]+", memory):
                if runs and match.start() - runs[-1][1] < 32:
                    runs[-1] = (runs[-1][0], match.end())
                else:
                    runs.append((match.start(), match.end()))
            body = _uleb(len(runs)) + b"".join(
                b"\x00\x41" + _sleb(start if start < 2**31 else start - 2**32) + b"\x0b"
                + _uleb(end - start) + memory[start:end]
                for start, end in runs
            )
        elif sid == 12:
            raise ValueError("modules with passive data segments cannot be snapshotted")
        out.append((sid, body))
    return _assemble(out)
