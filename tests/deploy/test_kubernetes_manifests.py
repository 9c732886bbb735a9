"""deploy/kubernetes validates against the Kubernetes schemas (offline, strict), and what it asks of the service
(its arguments, its config file, its probes' paths) is what the service has."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from wasm_runner.cli.commands import build_parser
from wasm_runner_server.cli.commands import add_serve_command
from wasm_runner_server.config import ServiceConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
VERSIONS = ("1.33.0", "1.37.0")
"""The oldest Kubernetes the manifests use fields of (hostUsers with an unmasked /proc, the preStop sleep action,
appArmorProfile) and the newest the validator knows."""


def resources() -> list[dict]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"] for doc in yaml.safe_load_all((DEPLOY / name).read_text())]


def by_kind(kind: str) -> dict:
    [found] = [r for r in resources() if r["kind"] == kind]
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_is_valid_kubernetes(version):
    kinds = []
    for resource in resources():
        kubernetes_validate.validate(resource, version, strict=True)
        kinds.append(resource["kind"])
    assert sorted(kinds) == ["PodDisruptionBudget", "Service", "Service", "ServiceAccount", "StatefulSet"]


def test_the_validator_refuses_a_mistake():
    broken = copy.deepcopy(by_kind("StatefulSet"))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_the_node_runs_the_service_as_its_cli_and_config_say():
    pod = by_kind("StatefulSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    parser, commands = build_parser()
    add_serve_command(commands)
    args = parser.parse_args(container["args"])  # the service's own parser: every flag exists
    assert args.command == "serve" and args.host == "0.0.0.0" and args.port == container["ports"][0]["containerPort"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert str(args.data_dir) == mounts["data"] and str(args.config).startswith(mounts["config"] + "/")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] in ("/readyz", "/healthz")
    # the example config file is one the service accepts, with a shared database and shared link secrets
    config = ServiceConfig.model_validate(tomllib.loads((DEPLOY / "config.example.toml").read_text()))
    assert config.store.url.startswith("postgresql://") and config.auth.presign_secrets
    assert pod["terminationGracePeriodSeconds"] > config.server.shutdown_timeout_s


def test_bubblewraps_needs_are_set_and_kept_to_the_pod():
    pod = by_kind("StatefulSet")["spec"]["template"]["spec"]
    context = pod["containers"][0]["securityContext"]
    assert pod["hostUsers"] is False  # the pod's own user namespace
    assert context["procMount"] == "Unmasked" and context["seccompProfile"]["type"] == "Unconfined"
    assert context["appArmorProfile"]["type"] == "Unconfined" and context["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    budget = by_kind("PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
