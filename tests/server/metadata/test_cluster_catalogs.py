"""Two service processes on one PostgreSQL, storing sessions in the S3 server or in one shared directory:
the artifacts and the templates are the cluster's, so what one node published, the other lists, serves,
starts sessions from and deletes, and another workspace finds nothing of it on either node."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import psycopg
from cluster_nodes import admin_auth, node_files
from service_process import serving

from wasm_runner_server.artifacts import object_blobs
from wasm_runner_server.artifacts.catalog import ArtifactCatalog
from wasm_runner_server.artifacts.object_blobs import ObjectBlobStorage
from wasm_runner_server.artifacts.settings import ArtifactSettings
from wasm_runner_server.artifacts.store import ArtifactStore
from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.metadata.sql import PostgresSql
from wasm_runner_server.storage import StorageSettings
from wasm_runner_server.storage.objects import open_objects


async def _exec(http: httpx.AsyncClient, url: str, session: str, code: str, auth) -> dict:
    answer = await http.post(f"{url}/v1/sessions/{session}/exec", json={"code": code}, headers=auth)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_artifacts_and_templates_published_through_one_node_are_served_by_the_other(postgres_url, storage,
                                                                                           tmp_path):
    nodes = [node_files(tmp_path, postgres_url, name, storage) for name in ("node-1", "node-2")]
    async with contextlib.AsyncExitStack() as stack:
        (_, url_1), (_, url_2) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                        for d, c in nodes))
        auth, other = admin_auth(postgres_url, nodes[0][0], "team"), admin_auth(postgres_url, nodes[0][0], "rival")
        async with httpx.AsyncClient(timeout=120) as http:
            source = (await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)).json()["id"]
            await _exec(http, url_1, source, "rows = list(range(7))\nopen('report.txt', 'w').write('v1')", auth)

            # an artifact published through node 1 is listed, read, linked and deleted through node 2
            published = await http.post(f"{url_1}/v1/sessions/{source}/artifacts", json={"path": "report.txt"},
                                        headers=auth)
            assert published.status_code == 201, published.text
            artifact = published.json()["id"]
            listed = (await http.get(f"{url_2}/v1/artifacts", headers=auth)).json()["artifacts"]
            assert [a["id"] for a in listed] == [artifact]
            content = await http.get(f"{url_2}/v1/artifacts/{artifact}/content", headers=auth)
            assert content.status_code == 200 and content.content == b"v1"
            link = (await http.post(f"{url_1}/v1/artifacts/{artifact}:presign", json={}, headers=auth)).json()["url"]
            via_2 = await http.get(url_2 + httpx.URL(link).raw_path.decode())
            assert via_2.status_code == 200 and via_2.content == b"v1"
            for url in (url_1, url_2):  # another workspace finds nothing on either node
                assert (await http.get(f"{url}/v1/artifacts/{artifact}", headers=other)).status_code == 404
                assert (await http.get(f"{url}/v1/artifacts", headers=other)).json()["artifacts"] == []

            # a template published through node 1 starts sessions on node 2, with its files and variables
            made = await http.post(f"{url_1}/v1/templates", json={"name": "ready", "session": source}, headers=auth)
            assert made.status_code == 201 and made.json()["kernels"] == ["python"], made.text
            assert [t["name"] for t in (await http.get(f"{url_2}/v1/templates", headers=auth)).json()["templates"]] \
                == ["ready"]
            started = await http.post(f"{url_2}/v1/sessions", json={"template": "ready"}, headers=auth)
            assert started.status_code == 201, started.text
            child = started.json()["id"]
            first = await _exec(http, url_2, child, "(len(rows), open('report.txt').read())", auth)
            assert first["value"] == "(7, 'v1')" and first["kernel_restored"], first
            with psycopg.connect(postgres_url) as conn:
                row = conn.execute("SELECT node FROM sessions WHERE id = %s", (child,)).fetchone()
            assert row == ("node-2",)  # started where it was asked for, from node 2's copy of the tree

            # republished through node 1, the next start on node 2 sees the new state, not its old copy
            await _exec(http, url_1, source, "rows = [1]\nopen('report.txt', 'w').write('v2')", auth)
            again = await http.post(f"{url_1}/v1/templates", json={"name": "ready", "session": source}, headers=auth)
            assert again.status_code == 201, again.text
            newer = (await http.post(f"{url_2}/v1/sessions", json={"template": "ready"}, headers=auth)).json()["id"]
            assert (await _exec(http, url_2, newer, "(len(rows), open('report.txt').read())", auth))["value"] \
                == "(1, 'v2')"
            assert (await _exec(http, url_2, child, "len(rows)", auth))["value"] == "7"  # a copy keeps its own

            for url in (url_1, url_2):
                assert (await http.get(f"{url}/v1/templates/ready", headers=other)).status_code == 404
                assert (await http.get(f"{url}/v1/templates", headers=other)).json()["templates"] == []
            refused = await http.post(f"{url_2}/v1/sessions", json={"template": "ready"}, headers=other)
            assert refused.status_code == 404, refused.text

            # deleted through node 2: gone on node 1, and its trees with it (node 2's copies too)
            assert (await http.delete(f"{url_2}/v1/templates/ready", headers=auth)).status_code == 204
            gone = await http.post(f"{url_1}/v1/sessions", json={"template": "ready"}, headers=auth)
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "template_not_found", gone.text
            assert not [p for p in (nodes[1][0] / "template-trees").iterdir() if p.name.startswith("tpl-")]
            assert (await http.delete(f"{url_2}/v1/artifacts/{artifact}", headers=auth)).status_code == 200
            assert (await http.get(f"{url_1}/v1/artifacts/{artifact}/content", headers=auth)).status_code == 404
    objects = open_objects(StorageSettings.model_validate(storage))
    assert not [k for k in objects.keys("sessions/") if k.startswith("sessions/tpl-")]


def test_a_shared_blob_no_artifact_names_is_deleted_only_once_it_is_old(postgres_url, s3, tmp_path, monkeypatch):
    db = postgres.acquire(StoreSettings(url=postgres_url))
    objects = open_objects(StorageSettings.model_validate(s3.settings()))
    store = ArtifactStore(ArtifactCatalog(sql=PostgresSql(db), on_close=lambda: postgres.release(db)),
                          ObjectBlobStorage(objects, tmp_path / "staging"), ArtifactSettings())
    try:
        kept = store.publish([b"kept"], workspace="w", key_id="k", session=None, source_path=None, name="a.txt",
                             media_type=None, note="")
        twice = [store.publish([b"same"], workspace="w", key_id="k", session=None, source_path=None, name=n,
                               media_type=None, note="") for n in ("b.txt", "c.txt")]
        assert twice[0].sha256 == twice[1].sha256
        store.delete(twice[0])
        assert b"".join(store.content(twice[1])) == b"same"  # the other artifact naming the bytes still reads
        store.delete(twice[1])
        assert store.blobs.exists(twice[1].sha256)  # not at once: another node may be publishing the same bytes
        store.prune()
        assert store.blobs.exists(twice[1].sha256)  # young: a publish may be on its way to naming it
        monkeypatch.setattr(object_blobs, "ORPHAN_GRACE_S", 0.0)
        store.prune(time.time() + 1)
        assert not store.blobs.exists(twice[1].sha256) and store.blobs.exists(kept.sha256)
        assert not list(Path(tmp_path / "staging").iterdir())  # nothing left waiting on the node's disk
    finally:
        store.close()
