"""PDF inside the native sandbox: pandoc (WeasyPrint as its engine), WeasyPrint's Python API in
python-data, ImageMagick (the sandbox's own policy allows PDF); and python-data's web frameworks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider, find_python_data
from wasm_runner.providers.native.bwrap import (
    IMAGEMAGICK_POLICY,
    PANDOC_WRAPPER,
    SandboxPolicy,
    etc_dir,
    find_bwrap,
    options,
    probe,
)
from wasm_runner.providers.native.doctor import doctor
from wasm_runner.providers.native.toolchain import RELOCATABLE_SHEBANG, relocate_scripts

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
needs_python_data = pytest.mark.skipif(
    find_python_data() is None,
    reason="the python-data environment is not built (wasm-runner prepare)")
MISSING = [tool for tool in ("pandoc", "convert", "gs", "pdftotext") if shutil.which(tool, path="/usr/bin:/bin") is None]
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed "
                                                       "(scripts/install-native.sh installs them)")

LIMITS = Limits(timeout_s=120)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("native-pdf"), isolation="in-process",
                providers=[NativeProvider()]) as runner:
        session = runner.session()
        session.workspace.ensure()
        yield session


def _text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


@needs_sandbox
@needs_python_data
@needs_tools
def test_pandoc_turns_markdown_into_a_pdf_with_no_engine_named(session):
    (session.path / "report.md").write_text("# Quarterly report\n\nSales rose by **12 percent**.\n")
    result = session.run_sync("pandoc report.md -o report.pdf", language="bash", limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    pdf = session.path / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
    text = _text(pdf)
    assert "Quarterly report" in text and "Sales rose by 12 percent." in text


@needs_sandbox
@needs_python_data
@needs_tools
def test_pandoc_keeps_an_engine_the_command_names_and_other_outputs(session):
    (session.path / "note.md").write_text("# Note\n")
    named = session.run_sync("pandoc note.md --pdf-engine=pdflatex -o note.pdf", language="bash", limits=LIMITS)
    assert named.exit_code != 0 and "pdflatex not found" in named.stderr  # the caller's choice, not the default
    html = session.run_sync("pandoc note.md -o note.html && cat note.html", language="bash", limits=LIMITS)
    assert html.exit_code == 0 and '<h1 id="note">Note</h1>' in html.stdout, html.stderr


@needs_sandbox
@needs_python_data
@needs_tools
def test_weasyprint_writes_a_pdf_from_html_in_python_data(session):
    code = ("from weasyprint import HTML\n"
            "HTML(string='<h1>Invoice 42</h1><p>Total: 99 EUR</p>').write_pdf('invoice.pdf')\n"
            "print(open('invoice.pdf', 'rb').read(4))\n")
    result = session.run_sync(code, language="python", provider="native", limits=LIMITS)
    assert result.exit_code == 0 and result.error is None, result.stderr
    assert result.stdout.strip() == "b'%PDF'"
    text = _text(session.path / "invoice.pdf")
    assert "Invoice 42" in text and "Total: 99 EUR" in text


@needs_sandbox
@needs_python_data
@needs_tools
def test_the_weasyprint_command_runs_in_a_bash_session(session):
    (session.path / "page.html").write_text("<p>From the command line</p>")
    result = session.run_sync("weasyprint page.html page.pdf && head -c 4 page.pdf", language="bash", limits=LIMITS)
    assert result.exit_code == 0 and result.stdout == "%PDF", result.stderr
    assert "From the command line" in _text(session.path / "page.pdf")


@needs_sandbox
@needs_tools
def test_imagemagick_writes_and_reads_pdf_in_the_sandbox(session):
    script = ("convert -size 64x32 xc:red photo.png && convert photo.png photo.pdf && head -c 4 photo.pdf && echo && "
              "convert photo.pdf back.png && identify -format '%m %wx%h' back.png")
    result = session.run_sync(script, language="bash", limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "%PDF\nPNG 64x32"
    assert (session.path / "photo.pdf").stat().st_size > 100


@needs_sandbox
@needs_tools
def test_imagemagick_still_refuses_postscript_and_remote_reads(session):
    eps = session.run_sync("convert -size 8x8 xc:red x.eps", language="bash", limits=LIMITS)
    assert eps.exit_code != 0 and "not allowed by the security policy `EPS'" in eps.stderr
    remote = session.run_sync("convert https://127.0.0.1/x.png y.png", language="bash", limits=LIMITS)
    assert remote.exit_code != 0 and "security policy `HTTPS'" in remote.stderr


def test_the_sandbox_etc_holds_the_sandbox_policy_and_the_host_keeps_its_own():
    host = Path("/etc/ImageMagick-6/policy.xml")
    if not host.parent.is_dir():
        pytest.skip("ImageMagick 6 is not installed (scripts/install-native.sh installs it)")
    before = host.read_bytes()
    assert (etc_dir() / "ImageMagick-6" / "policy.xml").read_bytes() == IMAGEMAGICK_POLICY.read_bytes()
    assert host.read_bytes() == before


def test_the_pandoc_wrapper_is_shown_only_with_python_data(tmp_path):
    if not Path("/usr/bin/pandoc").exists():
        pytest.skip("pandoc is not installed (scripts/install-native.sh installs it)")
    base = dict(workspace=tmp_path, tmp=tmp_path, env={})
    with_data = options(SandboxPolicy(), python_data=tmp_path, **base)
    assert ["--ro-bind", str(PANDOC_WRAPPER), "/usr/local/bin/pandoc"] == with_data[
        with_data.index(str(PANDOC_WRAPPER)) - 1:with_data.index(str(PANDOC_WRAPPER)) + 2]
    assert str(PANDOC_WRAPPER) not in options(SandboxPolicy(), **base)


def test_console_scripts_are_rewritten_to_run_the_python_beside_them(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    script = venv / "bin" / "hello"
    script.write_text(f"#!{venv}/bin/python3\nimport sys\nprint('hi', sys.argv[1:], sys.prefix)\n")
    script.chmod(0o755)
    (venv / "bin" / "activate").write_text("# not a script of this venv's python\n")
    assert relocate_scripts(venv) == 1
    assert script.read_bytes().startswith(RELOCATABLE_SHEBANG)
    moved = tmp_path / "elsewhere"
    venv.rename(moved)  # what the sandbox does: the same venv at another path
    done = subprocess.run([str(moved / "bin" / "hello"), "a b"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("hi ['a b']")
    assert (moved / "bin" / "activate").read_text() == "# not a script of this venv's python\n"


@needs_sandbox
@needs_python_data
def test_python_data_has_fastapi_flask_and_uvicorn(session):
    code = ("import fastapi, flask, uvicorn\n"
            "app = flask.Flask('demo')\n"
            "@app.get('/')\n"
            "def index():\n"
            "    return {'ok': True}\n"
            "print(app.test_client().get('/').get_json(), fastapi.FastAPI().title, uvicorn.__version__ != '')\n")
    result = session.run_sync(code, language="python", provider="native", limits=LIMITS)
    assert result.exit_code == 0 and result.error is None, result.stderr
    assert result.stdout.strip() == "{'ok': True} FastAPI True"
    cli = session.run_sync("uvicorn --version && flask --version", language="bash", limits=LIMITS)
    assert cli.exit_code == 0 and cli.stdout.startswith("Running uvicorn "), cli.stderr


@needs_python_data
def test_doctor_lists_the_pdf_tools_and_the_web_frameworks():
    report = doctor()
    assert report["pdf"]["weasyprint"] and report["pdf"]["pandoc_engine"] == "weasyprint"
    assert report["tools"]["ghostscript"]["present"]
    data = report["offers"]["python-data"][0]
    for module in ("weasyprint", "fastapi", "flask", "uvicorn"):
        assert f" {module}," in data or data.endswith(f" {module}"), module
    bash = report["offers"]["bash"]
    assert any(item.startswith("pandoc ") and item.endswith("(PDF by weasyprint)") for item in bash)
    assert any(item.startswith("weasyprint ") for item in bash) and any(item.startswith("ghostscript ") for item in bash)
