"""Common sandbox failures carry a hint that says what to do."""

import pytest

from wasm_runner.hints import DATA_MODULES, ENV_HINT, NETWORK_HINT, OUTSIDE_HINT, allow_hint, data_module_hint
from wasm_runner_protocol.egress import NetworkEvent


@pytest.mark.parametrize(
    "code, hint",
    [
        ("import socket\nsocket.socket().connect(('127.0.0.1', 80))", NETWORK_HINT),
        # urllib's request reaches the host, which refused it: the hint says how to allow it
        ("import urllib.request\nurllib.request.urlopen('http://example.com')",
         allow_hint(NetworkEvent(allowed=False, host="example.com", port=80))),
        ("import os\nos.environ['API_TOKEN']", ENV_HINT),
        ("open('/etc/app.conf', 'w').write('x')", OUTSIDE_HINT),
        ("import pandas as pd", data_module_hint("pandas")),
        ("from sklearn.linear_model import LinearRegression", data_module_hint("sklearn")),
    ],
    ids=["network", "url", "env", "outside", "pandas", "sklearn"],
)
def test_common_failures_say_what_to_do(runner, code, hint):
    result = runner.run_sync(code)
    assert result.error is not None and result.error.hint == hint


def test_the_data_modules_named_are_those_python_data_has():
    from wasm_runner.providers.native.toolchain import REQUIREMENTS

    pins = {line.split("==")[0].lower().replace("_", "-") for line in REQUIREMENTS.read_text().splitlines()
            if "==" in line}
    distributions = {"sklearn": "scikit-learn", "PIL": "pillow"}
    assert {distributions.get(name, name).lower() for name in DATA_MODULES} <= pins


def test_ordinary_errors_get_no_hint(runner):
    assert runner.run_sync("open('missing.txt').read()").error.hint is None
    assert runner.run_sync("{}['key']").error.hint is None
    assert runner.run_sync("import no_such_module").error.hint is None
