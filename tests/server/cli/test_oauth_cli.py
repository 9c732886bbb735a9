"""`wasm-runner oauth clients create|list|delete` on the data directory a service reads."""

from __future__ import annotations

import json

from wasm_runner_server.cli.console import main
from wasm_runner_server.security.oauth.store import OAuthStore


def test_create_list_and_delete_an_app(tmp_path, capsys):
    data = ["--data-dir", str(tmp_path)]
    assert main(["oauth", "clients", "create", "--workspace", "acme", "--name", "notebook", "--redirect-uri",
                 "https://nb.example/cb", "--scope", "files:read", "--scope", "exec", *data]) == 0
    out = capsys.readouterr()
    created = json.loads(out.out)
    assert created["client_secret"].startswith("wrcs_") and "only time" in out.err
    store = OAuthStore.in_data_dir(tmp_path)
    record = store.client(created["client_id"])
    store.close()
    assert record is not None and record.secret_matches(created["client_secret"])
    assert record.scopes == ("files:read", "exec") and not record.public

    assert main(["oauth", "clients", "create", "--workspace", "acme", "--name", "spa", "--public", "--redirect-uri",
                 "http://127.0.0.1:8765/cb", "--scope", "files:read", *data]) == 0
    assert json.loads(capsys.readouterr().out)["client_secret"] is None

    assert main(["oauth", "clients", "list", "--json", *data]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [c["name"] for c in listed] == ["notebook", "spa"] and all("client_secret" not in c for c in listed)

    assert main(["oauth", "clients", "delete", created["client_id"], *data]) == 0
    assert main(["oauth", "clients", "delete", created["client_id"], *data]) == 1
    capsys.readouterr()
    assert main(["oauth", "clients", "list", "--json", *data]) == 0
    assert [json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()] == ["spa"]


def test_bad_input_is_refused_with_a_reason(tmp_path, capsys):
    data = ["--data-dir", str(tmp_path)]
    for extra, reason in [(["--redirect-uri", "http://app.example/cb", "--scope", "exec"], "loopback"),
                          (["--redirect-uri", "https://app.example/cb", "--scope", "admin"], "unknown scopes")]:
        assert main(["oauth", "clients", "create", "--workspace", "acme", "--name", "x", *extra, *data]) == 2
        assert reason in capsys.readouterr().err
