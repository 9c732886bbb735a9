#!/usr/bin/env python3
"""Fetch the console's third-party browser files from the npm registry (`npm pack`, pinned versions)
into wasm_runner_server/console/vendor/ and write vendor.lock with each file's sha256.

Run it after changing a version below; a test checks the vendored files against the lock.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "wasm_runner_server" / "console" / "vendor"

FILES = [  # (package, version, path in the package, vendored name, license)
    ("@highlightjs/cdn-assets", "11.12.0", "highlight.min.js", "highlight.min.js", "BSD-3-Clause"),
    ("@highlightjs/cdn-assets", "11.12.0", "styles/github.min.css", "highlight-github.min.css", "BSD-3-Clause"),
    ("diff2html", "3.4.56", "bundles/js/diff2html.min.js", "diff2html.min.js", "MIT"),
    ("diff2html", "3.4.56", "bundles/css/diff2html.min.css", "diff2html.min.css", "MIT"),
    ("marked", "18.2.1", "lib/marked.umd.js", "marked.umd.js", "MIT"),
    ("dompurify", "3.4.18", "dist/purify.min.js", "purify.min.js", "MPL-2.0 OR Apache-2.0"),
    ("pdfjs-dist", "6.5.438", "build/pdf.min.mjs", "pdf.min.mjs", "Apache-2.0"),
    ("pdfjs-dist", "6.5.438", "build/pdf.worker.min.mjs", "pdf.worker.min.mjs", "Apache-2.0"),
    ("papaparse", "5.7.1", "papaparse.min.js", "papaparse.min.js", "MIT"),
    ("xlsx", "0.18.5", "dist/xlsx.mini.min.js", "xlsx.mini.min.js", "Apache-2.0"),
    ("@xterm/xterm", "6.0.0", "lib/xterm.mjs", "xterm.mjs", "MIT"),
    ("@xterm/xterm", "6.0.0", "css/xterm.css", "xterm.css", "MIT"),
]


def main() -> int:
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        packed: dict[tuple[str, str], tuple[Path, str]] = {}
        for package, version, inner, name, license_ in FILES:
            if (package, version) not in packed:
                out = subprocess.run(["npm", "pack", "--json", f"{package}@{version}"], cwd=tmp, check=True,
                                     capture_output=True, text=True).stdout
                info = json.loads(out)[0]
                packed[package, version] = (Path(tmp) / info["filename"], info["integrity"])
            tarball, integrity = packed[package, version]
            with tarfile.open(tarball) as archive:
                member = archive.extractfile(f"package/{inner}")
                assert member is not None, inner
                data = member.read()
            (VENDOR / name).write_bytes(data)
            entries.append({"file": name, "package": package, "version": version, "source": inner,
                            "license": license_, "tarball_integrity": integrity,
                            "sha256": hashlib.sha256(data).hexdigest()})
    (VENDOR / "vendor.lock").write_text(json.dumps({"files": entries}, indent=2) + "\n")
    print(f"{len(entries)} files in {VENDOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
