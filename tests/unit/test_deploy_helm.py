"""The Helm chart in deploy/helm/partsync/, rendered by a real `helm template` and linted with
`helm lint`: N followers sharing one group, the config and secrets mounted as files, probes on
the metrics port's /healthz and /readyz, a non-root read-only container. helm comes from
$PARTSYNC_HELM (which .ci/run sets after installing it), else PATH, else the cache .ci/run
installs into; the tests skip, saying so, only where there is none and none was promised."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from partsync.config import parse_config
from partsync.ui.cli_sync import sync

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "partsync"
TEST_VALUES = CHART / "ci" / "test-values.yaml"


def _helm() -> str:
    promised = os.environ.get("PARTSYNC_HELM")
    if promised:
        # CI installed it: a missing binary is a failure, not a skip.
        assert os.access(promised, os.X_OK), f"PARTSYNC_HELM={promised} is not executable"
        return promised
    cached = Path.home() / ".cache" / "partsync" / "bin" / "helm"
    found = shutil.which("helm") or (str(cached) if os.access(cached, os.X_OK) else None)
    if found is None:
        pytest.skip(
            "helm not found (PARTSYNC_HELM, PATH, ~/.cache/partsync/bin); .ci/run installs it"
        )
    return found


def _helm_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_helm(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _render(*args: str) -> dict[str, dict[str, Any]]:
    done = _helm_run("template", "mirror", str(CHART), *args)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), [d["kind"] for d in docs]
    return by_kind


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return _render("-f", str(TEST_VALUES))


def _container(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = rendered["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert len(containers) == 1
    return containers[0]


def test_helm_lint_passes() -> None:
    done = _helm_run("lint", "--strict", str(CHART), "-f", str(TEST_VALUES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_replicas_follow_in_one_group(rendered: dict[str, dict[str, Any]]) -> None:
    values = yaml.safe_load(TEST_VALUES.read_text())
    assert rendered["Deployment"]["spec"]["replicas"] == values["replicas"] == 3
    args = _container(rendered)["args"]
    assert args[0] == "sync"
    # The args are a valid partsync sync command line, as its own parser reads them.
    with sync.make_context("sync", list(args[1:])) as ctx:
        params = ctx.params
    assert params["follow"] is True
    assert params["group"] == "mirror-orders"
    assert params["topics"] == ("orders", "payments")
    assert params["sources"] == "dc2,dc3" and params["local"] == "dc1"
    assert params["metrics_port"] == 9464
    assert params["memory_budget"] == 268435456  # extraArgs come through


def test_probes_and_service_use_the_metrics_port(rendered: dict[str, dict[str, Any]]) -> None:
    c = _container(rendered)
    (port,) = c["ports"]
    assert port == {"name": "metrics", "containerPort": 9464, "protocol": "TCP"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    (svc_port,) = rendered["Service"]["spec"]["ports"]
    assert svc_port["targetPort"] == "metrics" and svc_port["port"] == 9464
    pod_labels = rendered["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert rendered["Service"]["spec"]["selector"].items() <= pod_labels.items()
    (endpoint,) = rendered["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    monitored = rendered["ServiceMonitor"]["spec"]["selector"]["matchLabels"]
    assert monitored.items() <= rendered["Service"]["metadata"]["labels"].items()


def test_config_and_secrets_are_mounted_as_files(rendered: dict[str, dict[str, Any]]) -> None:
    c = _container(rendered)
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    env = {e["name"]: e["value"] for e in c["env"]}

    assert env["PARTSYNC_CONFIG"] == mounts["config"]["mountPath"]
    assert mounts["config"]["subPath"] == "partsync.toml" and mounts["config"]["readOnly"]
    cm = rendered["ConfigMap"]
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    config = parse_config(tomllib.loads(cm["data"]["partsync.toml"]), env={})
    assert config.local == "dc1" and {"dc1", "dc2"} <= set(config.clusters)

    secret = rendered["Secret"]
    assert volumes["secrets"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert set(secret["stringData"]) == {"ca.pem", "password"}
    assert mounts["secrets"]["mountPath"] == "/etc/partsync/secrets"
    assert mounts["secrets"]["readOnly"] is True
    assert volumes["secrets"]["secret"]["defaultMode"] == 0o400


def test_runs_non_root_on_a_read_only_root_fs(rendered: dict[str, dict[str, Any]]) -> None:
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    c = _container(rendered)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # Writable scratch space only where mounted.
    tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert pod["terminationGracePeriodSeconds"] >= 30


def test_defaults_need_a_group_and_render_no_servicemonitor() -> None:
    done = _helm_run("template", "mirror", str(CHART))
    assert done.returncode != 0 and "sync.topics" in done.stderr, done.stderr
    minimal = _render(
        "--set", "sync.topics={orders}", "--set", "sync.sources={dc2}", "--set", "sync.group=g"
    )
    assert "ServiceMonitor" not in minimal and "Secret" not in minimal
    names = [v["name"] for v in minimal["Deployment"]["spec"]["template"]["spec"]["volumes"]]
    assert "secrets" not in names
    done = _helm_run(
        "template",
        "mirror",
        str(CHART),
        "--set",
        "sync.topics={orders}",
        "--set",
        "sync.sources={dc2}",
    )
    assert done.returncode != 0 and "sync.group" in done.stderr, done.stderr
