"""charts/taskstate: every ci scenario renders with the Helm engine, lints clean and
validates against a current Kubernetes; bad values are refused by the schema, clearly.

The Helm engine is the one embedded in the `helm-python-sdk` wheel; manifests go through
the `kubernetes-validate --strict` command line, as an operator's CI would run it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

helm_python: Any
try:
    import helm_python
except ImportError:  # a test that needs it says what to install; it never skips
    helm_python = None

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "taskstate"
SCENARIOS = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE = "1.34.0"  # a current Kubernetes (native sidecars are GA since 1.33)


def _helm() -> Any:
    if helm_python is None:
        pytest.fail(
            "helm-python-sdk is missing: bin/setup installs it (pip install helm-python-sdk)"
        )
    return helm_python


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    h = _helm()
    with h.Chart.load(str(CHART)) as c:
        yield c


def render(chart: Any, values: dict[str, Any]) -> dict[str, Any]:
    """template name -> parsed manifest (empty templates dropped)."""
    out = chart.render(values, name="taskstate", namespace="spark")
    docs = {}
    for name, text in out.items():
        if name.endswith(".yaml") and text.strip():
            docs[name.rsplit("/", 1)[-1]] = yaml.safe_load(text)
        elif name.endswith("NOTES.txt"):
            docs["NOTES.txt"] = text
    return docs


def values_of(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = _helm().values_from_yaml(path.read_text())
    return loaded


def test_there_are_scenarios_for_both_modes() -> None:
    modes = {yaml.safe_load(p.read_text())["mode"] for p in SCENARIOS}
    assert modes == {"daemonset", "podTemplate"} and len(SCENARIOS) >= 4


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_renders_lints_and_validates(chart: Any, scenario: Path, tmp_path: Path) -> None:
    values = values_of(scenario)
    lint = _helm().lint(str(CHART), values, strict=True, kube_version=f"v{KUBE}")
    problems = [m for m in lint["messages"] if m["severity"] >= 2]
    assert not problems and not lint["errors"], problems or lint["errors"]

    docs = render(chart, values)
    files = []
    for name, doc in docs.items():
        if name == "NOTES.txt" or doc["kind"] == "ServiceMonitor":
            continue  # a CRD: no Kubernetes schema; checked below
        files.append(tmp_path / name)
        files[-1].write_text(yaml.safe_dump(doc))
        if name == "configmap-podtemplate.yaml":
            # the Pod inside the ConfigMap is what Spark uses: validate it too (Spark
            # names the pod and sets the executor's image, so the template has neither)
            pod = yaml.safe_load(doc["data"]["executor-pod-template.yaml"])
            pod["metadata"]["name"] = "executor"
            files.append(tmp_path / "executor-pod.yaml")
            files[-1].write_text(yaml.safe_dump(pod))
    r = subprocess.run(
        [str(Path(sys.executable).parent / "kubernetes-validate"), "-k", KUBE, "--strict",
         *map(str, files)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("passed for resource") == len(files)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"] if doc["kind"] == "DaemonSet" else doc["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_daemonset_mode_socket_on_host_path_probes_and_security(chart: Any) -> None:
    docs = render(chart, values_of(CHART / "ci" / "full-values.yaml"))
    ds = docs["daemonset.yaml"]
    pod = ds["spec"]["template"]["spec"]
    assert {"name": "taskstate-socket", "hostPath": {"path": "/var/run/taskstate",
            "type": "DirectoryOrCreate"}} in pod["volumes"]  # fmt: skip
    assert (
        pod["securityContext"]["runAsNonRoot"] is True
        and pod["automountServiceAccountToken"] is False
    )
    (sidecar,) = [c for c in pod["containers"] if c["name"] == "taskstate-sidecar"]
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    args = sidecar["args"]
    assert args[:3] == ["sidecar", "--listen", "unix:///var/run/taskstate/sidecar.sock"]
    assert args[args.index("--metrics-port") + 1] == "9555"
    assert args[-2:] == ["--durability-timeout-ms", "2000"]
    assert sidecar["readinessProbe"]["exec"]["command"][:2] == ["taskstate", "health"]
    assert "--live" in sidecar["livenessProbe"]["exec"]["command"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in sidecar["env"]}
    assert env["TASKSTATE_REDIS_URL"] == {"name": "taskstate-redis", "key": "url"}
    assert env["TASKSTATE_REDIS_PASSWORD"] == {"name": "taskstate-redis", "key": "password"}
    # the only root step: chown of the socket directory, with nothing but CHOWN/FOWNER
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    # metrics: Service, ServiceMonitor on it, NetworkPolicy only lets the monitoring in
    svc, sm, np = docs["service.yaml"], docs["servicemonitor.yaml"], docs["networkpolicy.yaml"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod_labels(ds).items()
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    assert np["spec"]["ingress"] == [
        {"ports": [{"port": 9555, "protocol": "TCP"}], "from": [monitoring]}
    ]
    assert {"port": 6380, "protocol": "TCP"} in np["spec"]["egress"][1]["ports"]
    notes = docs["NOTES.txt"]
    assert (
        "spark.kubernetes.executor.volumes.hostPath.taskstate.mount.path=/var/run/taskstate"
        in notes
    )
    assert "spark.executorEnv.TASKSTATE_SIDECAR=unix:///var/run/taskstate/sidecar.sock" in notes


def pod_labels(ds: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = ds["spec"]["template"]["metadata"]["labels"]
    return labels


def test_pod_template_mode_is_a_native_sidecar(chart: Any) -> None:
    docs = render(chart, values_of(CHART / "ci" / "podtemplate-values.yaml"))
    assert "daemonset.yaml" not in docs and "networkpolicy.yaml" not in docs
    pod = yaml.safe_load(docs["configmap-podtemplate.yaml"]["data"]["executor-pod-template.yaml"])
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: runs beside the executor
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    (executor,) = pod["spec"]["containers"]
    assert executor["name"] == "spark-kubernetes-executor"
    assert executor["env"] == [{"name": "TASKSTATE_SIDECAR",
                                "value": "unix:///var/run/taskstate/sidecar.sock"}]  # fmt: skip
    assert pod["spec"]["securityContext"]["fsGroup"] == 185  # the socket's group
    assert "--redis-tls-cert" in sidecar["args"]
    notes = docs["NOTES.txt"]
    assert "spark.kubernetes.executor.podTemplateFile=executor-pod-template.yaml" in notes
    assert "podTemplateContainerName=spark-kubernetes-executor" in notes


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "statefulset", "redis": {"existingSecret": "r"}},
         "at '/mode': value must be one of 'daemonset', 'podTemplate'"),
        ({}, "at '/redis/existingSecret': minLength"),
        ({"redis": {"existingSecret": "r", "pasword": "x"}},
         "at '/redis': additional properties 'pasword' not allowed"),
        ({"redis": {"existingSecret": "r"}, "sidecar": {"socketDir": "run/ts"}},
         "at '/sidecar/socketDir'"),
        ({"redis": {"existingSecret": "r"}, "podSecurityContext": {"runAsNonRoot": False}},
         "at '/podSecurityContext/runAsNonRoot'"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_by_the_schema(
    chart: Any, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(_helm().HelmValuesError) as info:
        chart.render(values, name="taskstate", namespace="spark")
    assert message in str(info.value)


def test_dashboard_uses_only_metrics_the_sidecar_exports() -> None:
    from taskstate.sidecar.metrics import REGISTRY

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}
    exported = {
        family.name + suffix for family in REGISTRY.collect() for suffix in suffixes[family.type]
    }
    dash = json.loads((CHART / "dashboards" / "taskstate.json").read_text())
    used = {
        m
        for p in dash["panels"]
        for t in p["targets"]
        for m in re.findall(r"\b(taskstate_[a-z_]+)", t["expr"])
    }
    assert used and used <= exported, used - exported
    # every family the sidecar exports is on the dashboard
    assert {f.name for f in REGISTRY.collect()} <= {
        re.sub(r"_(total|bucket|count|sum)$", "", u) for u in used
    }


def test_dockerfile_installs_every_package_and_runs_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for d in {v.split("/")[0] for v in dirs.values()}:
        assert f"COPY {d}/ {d}/" in text, f"the image build misses {d}/"
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert 'ENTRYPOINT ["taskstate"]' in text
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"EXPOSE {values['metrics']['port']}" in text
    assert f"unix://{values['sidecar']['socketDir']}/{values['sidecar']['socketName']}" in text
