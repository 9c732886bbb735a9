"""Compiles the native sandbox's seccomp rules (syscall_filter.RULES) to a BPF program.

Standalone on purpose: it needs only the standard library and libseccomp's official Python
bindings (Debian's python3-seccomp), so the system interpreter that has them can run it as a
script when the service's own interpreter does not:  python3 -I seccomp_program.py < rules.json
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any


def build(rules: dict[str, Any], out: IO[bytes]) -> list[str]:
    """Write the BPF program of `rules` to the binary file `out`; returns the calls this
    libseccomp does not know (newer than it), which the filter then cannot name."""
    import seccomp

    eperm = seccomp.ERRNO(rules["errno"]["EPERM"])
    enosys = seccomp.ERRNO(rules["errno"]["ENOSYS"])
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    skipped = []

    def add(action: Any, call: str | int, *args: Any) -> None:
        try:
            f.add_rule(action, call, *args)
        except (RuntimeError, ValueError, OSError):
            skipped.append(str(call))  # not a call of this architecture, or unknown to this libseccomp

    for call in rules["eperm"]:
        add(eperm, call)
    for call in rules["enosys"]:
        add(enosys, call)
    for number in rules["enosys_numbers"]:
        add(enosys, number)
    for flag in rules["clone_flags"]:
        add(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for bit in rules["mode_bits"]:
        for call, index in rules["mode_argument"].items():
            add(eperm, call, seccomp.Arg(index, seccomp.MASKED_EQ, bit, bit))
        for call, (flags, mode) in rules["create_mode_argument"].items():
            add(eperm, call, seccomp.Arg(flags, seccomp.MASKED_EQ, rules["o_creat"], rules["o_creat"]),
                seccomp.Arg(mode, seccomp.MASKED_EQ, bit, bit))
    f.export_bpf(out)
    return skipped


if __name__ == "__main__":
    unknown = build(json.loads(sys.stdin.read()), sys.stdout.buffer)
    sys.stderr.write(json.dumps(unknown))
