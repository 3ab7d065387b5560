"""Deployment files and cluster builders: operator resources, Dockerfile/compose, jobqueue, sbatch.

Resources are checked against the CRDs the installed dask-kubernetes ships (when importable) and,
always, against the commands the installed distributed accepts (``dask scheduler`` / ``dask worker``
parsed by their own click commands).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from privcube.core.errors import ConfigError
from privcube.graphs.cluster import hpc
from privcube.graphs.cluster.kubernetes import (
    daskcluster_manifest,
    kube_cluster_from_spec,
    manifests_to_yaml,
    render_kubernetes_manifests,
    validate_kubernetes_spec,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
HPC = DEPLOY / "hpc"
DOCKER = DEPLOY / "docker"

SPEC: dict[str, Any] = {
    "type": "kubernetes", "image": "registry.example/privcube:0.1.0", "name": "dp-job", "namespace": "dp",
    "n_workers": 3, "worker_threads": 2, "worker_memory_limit": "7GiB",
    "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": 2, "memory": "8Gi"}},
    "env": {"OMP_NUM_THREADS": 1, "FLAG": True},
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "dp-data"}}],
    "volume_mounts": [{"name": "data", "mountPath": "/data"}],
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "dask", "effect": "NoSchedule"}],
    "node_selector": {"pool": "dask"}, "image_pull_secrets": ["regcred"], "service_account": "privcube",
    "job": {"out": "/data/runs/r1", "args": ["--seed", "7"]}, "allow_insecure": True,
}
SLURM: dict[str, Any] = {
    "type": "slurm", "queue": "normal", "account": "proj42", "cores": 8, "memory": "32GB", "processes": 2,
    "walltime": "02:00:00", "job_extra_directives": ["--exclusive", "--constraint=cpu"],
    "job_script_prologue": ["module load python/3.11"], "local_directory": "/scratch/$USER",
    "job_name": "privcube-w",
}


# --------------------------------------------------------------------------- helpers: schemas, CLIs
def walk_strings(obj: Any) -> Iterator[str]:
    """Every string inside a nested structure."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk_strings(k)
            yield from walk_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_strings(v)


def check_openapi(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Structural OpenAPI v3 check as the API server applies it to a CRD: types, required, unknown fields."""
    errors: list[str] = []
    if path == "$" and isinstance(value, dict):  # the API server handles these for every kind itself
        value = {k: v for k, v in value.items() if k not in ("apiVersion", "kind", "metadata")}
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null"]
    if "anyOf" in schema or schema.get("x-kubernetes-int-or-string"):
        if schema.get("x-kubernetes-int-or-string") and not isinstance(value, (int, str)):
            return [f"{path}: expected int or string, got {value!r}"]
        return []
    t = schema.get("type")
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if t in kinds:
        if not isinstance(value, kinds[t]) or (t in ("integer", "number") and isinstance(value, bool)):
            return [f"{path}: expected {t}, got {type(value).__name__} {value!r}"]
    if t == "object" or isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                errors.append(f"{path}: missing required field {req!r}")
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if props is not None and k in props:
                errors += check_openapi(v, props[k], f"{path}.{k}")
            elif isinstance(extra, dict):
                errors += check_openapi(v, extra, f"{path}.{k}")
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}: unknown field {k!r} (the API server would drop it)")
    if t == "array" and "items" in schema:
        for i, v in enumerate(value):
            errors += check_openapi(v, schema["items"], f"{path}[{i}]")
    return errors


@pytest.fixture(scope="module")
def crds() -> dict[str, dict[str, Any]]:
    """openAPIV3Schema of each dask-operator CRD, from the Helm chart shipped with dask-kubernetes."""
    dk = pytest.importorskip("dask_kubernetes", reason="CRD schemas come with the optional dask-kubernetes")
    folder = Path(dk.__file__).parent / "operator" / "deployment" / "helm" / "dask-kubernetes-operator" / "crds"
    out = {}
    for f in folder.glob("*.yaml"):
        crd = yaml.load(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        assert crd["spec"]["group"] == "kubernetes.dask.org"
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    assert {"DaskCluster", "DaskJob"} <= set(out)
    return out


def dask_cli(name: str, args: list[str]) -> dict[str, Any]:
    """Parse ``dask <name> ARGS`` with the installed distributed's own click command; returns its params."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="dask_cli") if e.name == name]
    assert ep.value.startswith("distributed.cli."), ep.value
    command = ep.load()
    ctx = command.make_context(f"dask {name}", list(args))
    return ctx.params


def check_dask_command(argv: list[str], tls_dir: Path | None = None) -> dict[str, Any]:
    """``argv`` is ``dask scheduler|worker ...`` that the installed distributed accepts.

    With ``tls_dir`` (holding ca.crt, tls.crt, tls.key) the pods' TLS mount point is moved there first:
    click checks that certificate files exist."""
    assert argv[0] == "dask" and argv[1] in ("scheduler", "worker"), argv
    if tls_dir is not None:
        argv = [a.replace("/etc/privcube-tls", str(tls_dir)) for a in argv]
    return dask_cli(argv[1], argv[2:])


def check_privcube_run(argv: list[str]) -> Any:
    """``argv`` is ``privcube run ...`` that the privcube CLI accepts; returns the parsed namespace."""
    from privcube.cli import build_parser

    assert argv[0] == "privcube", argv
    ns = build_parser().parse_args(argv[1:])
    assert ns.command == "run"
    return ns


def containers(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Role -> container of a DaskCluster or DaskJob."""
    spec = manifest["spec"]
    cluster = spec["cluster"]["spec"] if manifest["kind"] == "DaskJob" else spec
    out = {"scheduler": cluster["scheduler"]["spec"]["containers"][0],
           "worker": cluster["worker"]["spec"]["containers"][0]}
    if manifest["kind"] == "DaskJob":
        out["job"] = spec["job"]["spec"]["containers"][0]
    return out


def check_resource(doc: dict[str, Any], tls_dir: Path | None = None) -> None:
    """Operator expectations every DaskCluster/DaskJob we produce must meet (see check_dask_command)."""
    assert doc["apiVersion"] == "kubernetes.dask.org/v1"
    assert doc["kind"] in ("DaskCluster", "DaskJob")
    name = doc["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 53
    cluster = doc["spec"]["cluster"]["spec"] if doc["kind"] == "DaskJob" else doc["spec"]
    assert {"scheduler", "worker"} <= set(cluster)
    assert {"spec", "service"} <= set(cluster["scheduler"])
    assert cluster["scheduler"]["service"]["selector"] == {"dask.org/cluster-name": name,
                                                           "dask.org/component": "scheduler"}
    c = containers(doc)
    port_names = {p["name"] for p in c["scheduler"]["ports"]}
    assert {p["targetPort"] for p in cluster["scheduler"]["service"]["ports"]} <= port_names
    assert {"tcp-comm", "http-dashboard"} <= port_names  # the operator looks these names up
    assert c["scheduler"]["readinessProbe"]["httpGet"]["path"] == "/health"
    sched = check_dask_command(c["scheduler"]["args"], tls_dir)
    assert str(sched["port"]) == "8786" and sched["host"] == "0.0.0.0"
    wk = check_dask_command(c["worker"]["args"], tls_dir)
    assert wk["name"] == "$(DASK_WORKER_NAME)" and wk["scheduler"] is None  # from DASK_SCHEDULER_ADDRESS
    for s in walk_strings(doc):
        assert not re.search(r"\bdask-(scheduler|worker)\b", s) or s.startswith("dask.org"), s
    if doc["kind"] == "DaskJob":
        assert doc["spec"]["job"]["spec"]["restartPolicy"] == "Never"
        ns = check_privcube_run(c["job"]["args"])
        assert ns.scheduler_address == "$(DASK_SCHEDULER_ADDRESS)" and ns.scheduler_file is None


# ------------------------------------------------------------------------------ kubernetes resources
def test_rendered_resources_meet_operator_expectations():
    docs = render_kubernetes_manifests(SPEC)
    assert [d["kind"] for d in docs] == ["DaskCluster", "DaskJob"]
    for d in docs:
        check_resource(d)
        assert d["metadata"]["namespace"] == "dp"
    c = containers(docs[1])
    params = check_dask_command(c["worker"]["args"])
    assert params["nthreads"] == 2 and params["memory_limit"] == "7GiB"
    assert c["worker"]["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"},
                                        "limits": {"cpu": "2", "memory": "8Gi"}}
    assert c["worker"]["env"] == [{"name": "OMP_NUM_THREADS", "value": "1"}, {"name": "FLAG", "value": "true"}]
    assert c["worker"]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    ns = check_privcube_run(c["job"]["args"])
    assert ns.config == "/etc/privcube/config.yaml" and ns.out == "/data/runs/r1" and ns.seed == 7
    worker_pod = docs[0]["spec"]["worker"]["spec"]
    assert worker_pod["nodeSelector"] == {"pool": "dask"} and worker_pod["serviceAccountName"] == "privcube"
    assert worker_pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert docs[0]["spec"]["worker"]["replicas"] == 3


def test_rendered_resources_validate_against_crds(crds):
    job_config = {"mechanism": "residual-planner", "cluster": dict(SPEC)}
    docs = render_kubernetes_manifests(SPEC, job_config=job_config)
    assert [d["kind"] for d in docs] == ["ConfigMap", "DaskCluster", "DaskJob"]
    for d in docs[1:]:
        assert check_openapi(d, crds[d["kind"]]) == []
    # the validator itself catches what the API server would reject or silently drop
    bad = daskcluster_manifest(SPEC)
    bad["spec"]["worker"]["replicas"] = "3"
    bad["spec"]["worker"]["spec"]["containers"][0]["argz"] = []
    del bad["spec"]["scheduler"]["service"]
    errors = check_openapi(bad, crds["DaskCluster"])
    assert any("replicas" in e for e in errors) and any("argz" in e for e in errors)
    assert any("'service'" in e for e in errors)


def test_config_map_ships_config_without_cluster_and_is_mounted():
    job_config = {"data": {"path": "/data/x"}, "mechanism": "residual-planner", "cluster": dict(SPEC)}
    cm, _, job = render_kubernetes_manifests(SPEC, job_config=job_config)
    assert cm["apiVersion"] == "v1" and cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "dp-job-config"
    shipped = yaml.safe_load(cm["data"]["config.yaml"])
    assert shipped == {"data": {"path": "/data/x"}, "mechanism": "residual-planner",
                       "cluster": {"allow_insecure": True}}
    pod = job["spec"]["job"]["spec"]
    assert {"name": "privcube-config", "configMap": {"name": "dp-job-config"}} in pod["volumes"]
    mount = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "privcube-config"]
    assert mount == [{"name": "privcube-config", "mountPath": "/etc/privcube", "readOnly": True}]
    with pytest.raises(ConfigError, match=r"cluster\.job\.config"):
        render_kubernetes_manifests({**SPEC, "job": {"config": "/elsewhere.yaml"}}, job_config=job_config)


def test_daskjob_runner_accepts_its_in_cluster_scheduler_only_with_consent():
    """Without TLS the runner's --scheduler-address is tcp://NAME-scheduler.NS.svc...: privcube refuses plain
    text off loopback, so rendering a DaskJob with its config needs allow_insecure and ships it to the runner."""
    from privcube.config import parse_cluster
    from privcube.graphs.cluster.handle import resolve_cluster

    raw = yaml.safe_load((K8S / "privcube-job.yaml").read_text())
    plain = {k: v for k, v in raw["cluster"].items() if k != "tls_secret"}
    insecure = {**plain, "allow_insecure": True}
    cm = render_kubernetes_manifests(insecure, job_config=raw, kinds=["DaskJob"])[0]
    shipped = parse_cluster(yaml.safe_load(cm["data"]["config.yaml"]))  # as privcube run reads it
    assert shipped == {"allow_insecure": True}
    address = "tcp://privcube-scheduler.privcube.svc.cluster.local:8786"  # what the operator injects
    handle = resolve_cluster(shipped, scheduler_address=address)
    assert handle.type == "address" and handle.allow_insecure is True
    from privcube.graphs.cluster.security import check_address_security

    assert check_address_security(address, handle.security, handle.allow_insecure) == address
    with pytest.raises(ConfigError, match="allow_insecure"):  # what the runner would hit without consent
        check_address_security(address, None, False)

    with pytest.raises(ConfigError, match=r"cluster\.allow_insecure.*security\.tls"):
        render_kubernetes_manifests(plain, job_config=raw, kinds=["DaskJob"])
    assert render_kubernetes_manifests(plain, kinds=["DaskCluster"])  # no runner: nothing to consent to
    # consent may also sit under security:, as for the other cluster types
    nested = {**plain, "security": {"allow_insecure": True}}
    assert render_kubernetes_manifests(nested, job_config=raw, kinds=["DaskJob"])[0] == cm


def _tls_pem(folder: Path) -> dict[str, str]:
    """A self-signed certificate (its own CA) and key as files, keyed like security.tls."""
    from distributed import Security

    sec = Security.temporary()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"ca_file": folder / "ca.crt", "cert": folder / "tls.crt", "key": folder / "tls.key"}
    paths["ca_file"].write_text(sec.tls_ca_file)
    paths["cert"].write_text(sec.tls_worker_cert)
    paths["key"].write_text(sec.tls_worker_key)
    return {k: str(v) for k, v in paths.items()}


POD_TLS = {"ca_file": "/etc/privcube-tls/ca.crt", "cert": "/etc/privcube-tls/tls.crt",
           "key": "/etc/privcube-tls/tls.key"}


def check_tls_pods(doc: dict[str, Any], secret: str, pem_dir: Path) -> None:
    """Every pod of a TLS DaskCluster/DaskJob mounts the Secret and runs its process with TLS.

    ``pem_dir`` holds ca.crt/tls.crt/tls.key: the dask commands are parsed with the mount point moved
    there (click checks that the files exist)."""
    name = doc["metadata"]["name"]
    cluster = doc["spec"]["cluster"]["spec"] if doc["kind"] == "DaskJob" else doc["spec"]
    pods = {"scheduler": cluster["scheduler"]["spec"], "worker": cluster["worker"]["spec"]}
    if doc["kind"] == "DaskJob":
        pods["job"] = doc["spec"]["job"]["spec"]
    for role, pod in pods.items():
        (c,) = pod["containers"]
        vol = [v for v in pod["volumes"] if v["name"] == "privcube-tls"]
        assert vol == [{"name": "privcube-tls", "secret": {"secretName": secret, "defaultMode": 0o444}}], role
        assert {"name": "privcube-tls", "mountPath": "/etc/privcube-tls", "readOnly": True} in c["volumeMounts"]
        env = {e["name"]: e for e in c["env"]}
        assert env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"]["value"] == "True", role
        if role == "scheduler":
            assert "DASK_SCHEDULER_ADDRESS" not in env
            continue
        # our own tls:// address: the operator adds its plain tcp:// one only where a container has none
        assert env["DASK_SCHEDULER_ADDRESS"]["value"] == \
            f"tls://{name}-scheduler.$(PRIVCUBE_POD_NAMESPACE).svc.cluster.local:8786"
        names = [e["name"] for e in c["env"]]
        assert names.index("PRIVCUBE_POD_NAMESPACE") < names.index("DASK_SCHEDULER_ADDRESS")  # $(VAR) order
        assert env["PRIVCUBE_POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    c = containers(doc)
    for role in ("scheduler", "worker"):
        params = check_dask_command(c[role]["args"], pem_dir)
        assert (params["tls_ca_file"], params["tls_cert"], params["tls_key"]) == \
            tuple(v.replace("/etc/privcube-tls", str(pem_dir)) for v in POD_TLS.values()), role
        if role == "scheduler":
            assert params["protocol"] == "tls"


def test_kubernetes_tls_is_rendered_into_every_pod(tmp_path, crds):
    from privcube.config import parse_cluster
    from privcube.graphs.cluster.security import security_from_spec

    pem = _tls_pem(tmp_path / "tls")
    job_config = {"mechanism": "residual-planner", "cluster": dict(SPEC)}
    base = {k: v for k, v in SPEC.items() if k != "allow_insecure"}  # TLS needs no consent to plain text
    for i, (spec, secret, rendered) in enumerate((
            ({**base, "security": {"tls": "auto"}}, "dp-job-tls", True),
            ({**base, "security": "auto", "tls_secret": "my-certs"}, "my-certs", True),
            ({**base, "security": {"tls": pem}}, "dp-job-tls", True),
            ({**base, "tls_secret": "cert-manager.io-made"}, "cert-manager.io-made", False))):
        docs = render_kubernetes_manifests(spec, job_config=job_config)
        kinds = [d["kind"] for d in docs]
        assert kinds == (["Secret"] if rendered else []) + ["ConfigMap", "DaskCluster", "DaskJob"]
        for d in docs[-2:]:
            check_resource(d, tmp_path / "tls")
            check_tls_pods(d, secret, tmp_path / "tls")
            assert check_openapi(d, crds[d["kind"]]) == []
        shipped = parse_cluster(yaml.safe_load(docs[-3]["data"]["config.yaml"]))
        assert shipped == {"security": {"tls": POD_TLS}}
        if rendered:
            sec = docs[0]
            assert sec["metadata"] == {"name": secret, "labels": {"app.kubernetes.io/name": "privcube"},
                                       "namespace": "dp"}
            assert sec["type"] == "Opaque" and set(sec["stringData"]) == {"ca.crt", "tls.crt", "tls.key"}
            # the rendered material is a working PEM set (what the pods' processes will load)
            folder = tmp_path / f"pod-{i}"
            folder.mkdir()
            for k, v in sec["stringData"].items():
                (folder / k).write_text(v)
            files = {k: str(folder / Path(v).name) for k, v in POD_TLS.items()}
            assert security_from_spec({"tls": files}).require_encryption
    # files are shipped as they are; auto makes a new certificate on every rendering
    files_secret = render_kubernetes_manifests({**base, "security": {"tls": pem}}, kinds=["DaskCluster"])[0]
    assert files_secret["stringData"]["tls.key"] == Path(pem["key"]).read_text()
    a, b = (render_kubernetes_manifests({**base, "security": {"tls": "auto"}}, kinds=["DaskCluster"])[0]
            for _ in range(2))
    assert a["stringData"]["tls.key"] != b["stringData"]["tls.key"]
    # the shipped example config uses an existing Secret
    raw = yaml.safe_load((K8S / "privcube-job.yaml").read_text())
    for d in render_kubernetes_manifests(raw["cluster"], job_config=raw, kinds=["DaskJob"])[1:]:
        check_tls_pods(d, "privcube-tls", tmp_path / "tls")


@pytest.mark.parametrize("extra, key", [
    ({"tls_secret": "Bad_Name"}, "cluster.tls_secret"),
    ({"security": {"tls": {"ca_file": "/nowhere/ca.crt", "cert": "/nowhere/c", "key": "/nowhere/k"}}},
     "cluster.security.tls.ca_file"),
    ({"security": {"tls": {"cert": "/x"}}}, "cluster.security.tls"),
    ({"security": ["tls"]}, "cluster.security"),
])
def test_bad_kubernetes_tls_keys_are_named(extra, key):
    with pytest.raises(ConfigError) as e:
        validate_kubernetes_spec({"type": "kubernetes", "image": "x:1", **extra})
    assert key in str(e.value)


def test_kube_cluster_from_a_laptop_refuses_tls():
    """KubeCluster (dask-kubernetes 2026.3) talks plain tcp:// to its scheduler: TLS is refused there, with
    the way out (a DaskJob) named, and before anything is started."""
    from privcube.graphs.cluster.handle import resolve_cluster

    base = {k: v for k, v in SPEC.items() if k != "allow_insecure"}
    for spec in ({**base, "security": {"tls": "auto"}}, {**base, "security": "auto"}, {**base, "tls_secret": "x"}):
        with pytest.raises(ConfigError, match=r"security\.tls \(kubernetes\).*DaskJob"):
            resolve_cluster(spec)
    # a CLI address replaces the kubernetes target: the config's TLS then applies to that address, where
    # 'auto' (a certificate only this process holds) cannot work
    with pytest.raises(ConfigError, match=r"'auto'.*\(address\)"):
        resolve_cluster({**base, "security": "auto"}, scheduler_address="tls://10.0.0.9:8786")
    h = resolve_cluster({**base, "tls_secret": "x"}, scheduler_address="tls://10.0.0.9:8786")
    assert h.type == "address" and h.security is None
    with pytest.raises(ConfigError, match=r"cluster\.security\.tls \(kubernetes\).*DaskJob"):
        kube_cluster_from_spec({**base, "tls_secret": "x"})  # called directly, before KubeCluster is imported
    with pytest.raises(ConfigError, match="allow_insecure"):
        validate_kubernetes_spec({**SPEC, "allow_insecure": "yes"})


def test_kube_cluster_scheduler_address_is_security_checked(monkeypatch):
    """From a laptop, KubeCluster's address is checked like any other: a port-forward to localhost passes,
    a plain LoadBalancer address needs allow_insecure; a refused cluster is closed again."""
    from privcube.graphs.cluster import kubernetes as k8s
    from privcube.graphs.cluster.handle import resolve_cluster

    closed: list[str] = []

    class FakeKubeCluster:
        def __init__(self, address: str) -> None:
            self.scheduler_address = address

        def close(self) -> None:
            closed.append(self.scheduler_address)

    monkeypatch.setattr(k8s, "kube_cluster_from_spec", lambda spec: FakeKubeCluster("tcp://203.0.113.7:8786"))
    spec = {k: v for k, v in SPEC.items() if k != "allow_insecure"}
    handle = resolve_cluster(spec)
    with pytest.raises(ConfigError, match="203.0.113.7"), handle:
        pass
    assert closed == ["tcp://203.0.113.7:8786"] and handle.cluster is None


def test_static_kubernetes_files_are_the_rendered_example(crds, tmp_path):
    pem_dir = Path(_tls_pem(tmp_path / "tls")["ca_file"]).parent
    raw = yaml.safe_load((K8S / "privcube-job.yaml").read_text())
    job_docs = render_kubernetes_manifests(raw["cluster"], job_config=raw, kinds=["DaskJob"])
    assert list(yaml.safe_load_all((K8S / "daskjob.yaml").read_text())) == job_docs
    cluster_docs = render_kubernetes_manifests(raw["cluster"], kinds=["DaskCluster"])
    assert list(yaml.safe_load_all((K8S / "daskcluster.yaml").read_text())) == cluster_docs
    for d in job_docs + cluster_docs:
        if d["kind"] != "ConfigMap":
            check_resource(d, pem_dir)
            check_tls_pods(d, "privcube-tls", pem_dir)
            assert check_openapi(d, crds[d["kind"]]) == []
    pvc = yaml.safe_load((K8S / "pvc.yaml").read_text())
    claim = job_docs[-1]["spec"]["cluster"]["spec"]["worker"]["spec"]["volumes"][0]
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert claim["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]


def test_operator_helm_values_use_chart_keys():
    dk = pytest.importorskip("dask_kubernetes", reason="the operator chart comes with dask-kubernetes")
    chart = Path(dk.__file__).parent / "operator" / "deployment" / "helm" / "dask-kubernetes-operator"
    defaults = yaml.safe_load((chart / "values.yaml").read_text())
    ours = yaml.safe_load((K8S / "operator-values.yaml").read_text())

    def check(mine: dict[str, Any], theirs: dict[str, Any], path: str) -> None:
        for k, v in mine.items():
            assert k in theirs, f"{path}{k} is not a value of the dask-kubernetes-operator chart"
            if isinstance(v, dict) and isinstance(theirs[k], dict) and theirs[k]:
                check(v, theirs[k], f"{path}{k}.")

    check(ours, defaults, "")


def test_render_cli_prints_apply_ready_yaml(capsys):
    from privcube.graphs.cluster.kubernetes import main

    assert main([str(K8S / "privcube-job.yaml"), "--kind", "DaskCluster", "--kind", "DaskJob"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "DaskCluster", "DaskJob"]
    assert main([str(HPC / "slurm-job.yaml")]) == 2
    assert "cluster.type" in capsys.readouterr().err
    text = manifests_to_yaml(render_kubernetes_manifests(SPEC))
    assert "&id" not in text and "*id" not in text  # no YAML aliases: kubectl-friendly


@pytest.mark.parametrize("spec, key", [
    ({"n_worker": 2}, "n_worker"),
    ({"resources": {"limit": {"cpu": "1"}}}, "resources.limit"),
    ({"resources": {"limits": {"cpu": "two"}}}, "resources.limits.cpu"),
    ({"job": {"output": "/x"}}, "job.output"),
    ({"env": [{"name": "A", "valu": "1"}]}, "env.A"),
    ({"n_workers": -1}, "n_workers"),
    ({"name": "Bad_Name"}, "name"),
    ({"image_pull_policy": "Sometimes"}, "image_pull_policy"),
    ({"worker_memory_limit": "lots"}, "worker_memory_limit"),
    ({"volumes": {"name": "x"}}, "volumes"),
])
def test_bad_kubernetes_keys_raise_config_error_naming_the_key(spec, key):
    with pytest.raises(ConfigError) as e:
        validate_kubernetes_spec({"type": "kubernetes", "image": "x:1", **spec})
    assert key in str(e.value)


def test_kubernetes_image_is_required():
    with pytest.raises(ConfigError, match=r"cluster\.image"):
        render_kubernetes_manifests({"type": "kubernetes"})


def test_kube_cluster_from_spec_hands_our_spec_to_kubecluster(monkeypatch):
    """KubeCluster receives the rendered DaskCluster (dask scheduler/worker), never its own template."""
    op = pytest.importorskip("dask_kubernetes.operator", reason="optional extra 'kubernetes'")
    from dask_kubernetes.operator.kubecluster.kubecluster import make_cluster_spec

    upstream = make_cluster_spec(name="x", image="img")
    emitted = {upstream["spec"][part]["spec"]["containers"][0]["args"][0] for part in ("scheduler", "worker")}
    assert emitted == {"dask-scheduler", "dask-worker"}  # why we override: the installed distributed lacks them
    from importlib.metadata import entry_points

    installed = {e.name for e in entry_points(group="console_scripts")}
    assert not emitted & installed and shutil.which("dask-scheduler") is None and "dask" in installed

    seen: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            seen.append(kwargs)

    monkeypatch.setattr(op, "KubeCluster", Recorder)
    spec = {k: v for k, v in SPEC.items() if k != "name"}
    kube_cluster_from_spec({**spec, "resource_timeout": 120})
    kube_cluster_from_spec(spec)
    a, b = seen
    assert a["namespace"] == "dp" and a["resource_timeout"] == 120 and a["quiet"] is True
    manifest = a["custom_cluster_spec"]
    assert "namespace" not in manifest["metadata"]
    check_resource(manifest)
    assert re.fullmatch(r"privcube-[0-9a-f]{8}", manifest["metadata"]["name"])
    assert manifest["metadata"]["name"] != b["custom_cluster_spec"]["metadata"]["name"]


def test_kubernetes_extra_missing_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_kubernetes.operator", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"privcube\[kubernetes\]"):
        kube_cluster_from_spec(SPEC)
    assert render_kubernetes_manifests(SPEC)  # rendering never needs dask-kubernetes


@pytest.mark.cluster
def test_kube_cluster_on_a_real_cluster():
    """Needs a Kubernetes context with the dask operator installed and PRIVCUBE_TEST_IMAGE pushed."""
    pytest.importorskip("dask_kubernetes", reason="optional extra 'kubernetes'")
    from distributed import Client

    image = os.environ.get("PRIVCUBE_TEST_IMAGE")
    if not image:
        pytest.skip("set PRIVCUBE_TEST_IMAGE to an image built from deploy/docker/Dockerfile")
    cluster = kube_cluster_from_spec({"type": "kubernetes", "image": image, "n_workers": 1,
                                      "resource_timeout": 300})
    try:
        with Client(cluster) as client:
            client.wait_for_workers(1, timeout=300)
            assert client.submit(sum, [1, 2, 3]).result() == 6
    finally:
        cluster.close()


# ------------------------------------------------------------------------------------ docker/compose
@pytest.mark.cluster
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_compose_job_on_real_docker(tmp_path, tls):
    """Needs Docker with compose and PRIVCUBE_TEST_DOCKER=1: builds the image, runs scheduler, 2 workers and
    the runner on a small job (plain, or with compose.tls.yaml), and checks the run directory. Not runnable
    in the project's CI sandbox."""
    import json

    import numpy as np
    import pandas as pd

    if os.environ.get("PRIVCUBE_TEST_DOCKER") != "1" or not shutil.which("docker"):
        pytest.skip("set PRIVCUBE_TEST_DOCKER=1 on a machine with docker and docker compose")
    job = tmp_path / "job"
    (job / "data").mkdir(parents=True)
    (job / "out").mkdir()
    rng = np.random.default_rng(2)
    pd.DataFrame({"a": rng.integers(0, 3, 2000), "b": rng.integers(0, 4, 2000)}).to_parquet(
        job / "data" / "part-0.parquet", index=False)
    (job / "domain.json").write_text(json.dumps({"a": 3, "b": 4}))
    (job / "config.yaml").write_text(yaml.safe_dump({
        "data": {"path": "data", "domain": "domain.json"}, "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "cluster": {"security": {"tls": {"ca_file": "/tls/ca.crt", "cert": "/tls/tls.crt", "key": "/tls/tls.key"}}}
        if tls else {"allow_insecure": True}}))  # tcp://scheduler:8786 on the compose bridge network
    if tls:
        for f in _tls_pem(job / "tls").values():
            os.chmod(f, 0o644)  # readable by the containers' uid 1000
    os.chmod(job, 0o777)
    os.chmod(job / "out", 0o777)  # the containers run as uid 1000
    env = {**os.environ, "PRIVCUBE_JOB_DIR": str(job), "PRIVCUBE_WORKERS": "2", "PRIVCUBE_RUN": "r1",
           "PRIVCUBE_UID": "1000", "PRIVCUBE_GID": "1000"}
    compose = ["docker", "compose", "-p", f"privcube-test-{os.getpid()}", "-f", str(DOCKER / "compose.yaml")]
    if tls:
        compose += ["-f", str(DOCKER / "compose.tls.yaml")]
        env["PRIVCUBE_TLS_DIR"] = str(job / "tls")
    try:
        r = subprocess.run([*compose, "up", "--build", "--abort-on-container-exit", "--exit-code-from", "runner"],
                           env=env, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    finally:
        subprocess.run([*compose, "down", "--volumes"], env=env, capture_output=True, timeout=300)
    out = job / "out" / "r1"
    assert (out / ".complete").exists() and (out / "answers" / "index.json").exists()
    assert json.loads((out / "ledger.json").read_text())["spent"]["rho"] > 0


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "dangling continuation line"
    return out


def test_dockerfile_pins_dask_and_installs_privcube():
    import distributed

    ins = dockerfile_instructions((DOCKER / "Dockerfile").read_text())
    known = {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "CMD", "ENTRYPOINT", "LABEL"}
    assert {i for i, _ in ins} <= known
    first = next(i for i, (w, _) in enumerate(ins) if w != "ARG")
    assert ins[first][0] == "FROM" and [w for w, _ in ins].count("FROM") == 1
    args = dict(a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)
    assert args["DASK_VERSION"] == distributed.__version__  # the image runs the version the tests run
    run = " ".join(a for w, a in ins if w == "RUN")
    assert '"distributed==${DASK_VERSION}"' in run and '"dask[array,dataframe]==${DASK_VERSION}"' in run
    assert '".[${PRIVCUBE_EXTRAS}]"' in run and "dask scheduler --help" in run and "dask worker --help" in run
    for w, a in ins:
        if w == "COPY":
            *sources, _ = a.split()
            for s in sources:
                assert (ROOT / s).exists(), f"COPY source {s} missing from the build context (repo root)"
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    for keep in ("!pyproject.toml", "!README.md", "!engine/**", "!graphs/**", "!storage/**"):
        assert keep in ignore
    assert ("USER", "1000:1000") in ins
    expose = " ".join(a for w, a in ins if w == "EXPOSE").split()
    assert {"8786", "8787"} <= set(expose)


def interpolate(value: Any) -> Any:
    """Compose ``${VAR:-default}`` interpolation with the defaults."""
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def test_compose_runs_scheduler_workers_and_runner():
    raw = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = interpolate(raw["services"])
    assert set(services) == {"scheduler", "worker", "runner"}
    for svc in services.values():
        assert svc["image"] == "privcube:0.1.0" and "/job" in svc["volumes"][0]  # anchor merged
    build = raw["services"]["scheduler"]["build"]
    assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
    sched = check_dask_command(services["scheduler"]["command"])
    assert str(sched["port"]) == "8786"
    worker = check_dask_command(services["worker"]["command"])
    assert worker["scheduler"] == "tcp://scheduler:8786" and worker["nthreads"] == 1
    assert int(services["worker"]["deploy"]["replicas"]) == 2
    ns = check_privcube_run(services["runner"]["command"])
    assert ns.scheduler_address == "tcp://scheduler:8786" and ns.config == "/job/config.yaml"
    assert ns.out.startswith("/job/out/")
    assert services["runner"]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert any("/health" in part for part in services["scheduler"]["healthcheck"]["test"])
    for port in services["scheduler"]["ports"]:
        assert port.startswith("127.0.0.1:")  # dashboard on loopback only


def compose_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`docker compose -f base -f overlay` for the keys used here: command replaced, volumes and
    environment merged (volumes by container path)."""
    out = {name: dict(svc) for name, svc in base.items()}
    for name, svc in overlay.items():
        merged = out[name]
        for key, value in svc.items():
            if key == "volumes":
                targets = {v.split(":")[1]: v for v in merged.get("volumes", []) + value}
                merged["volumes"] = list(targets.values())
            elif key == "environment":
                merged["environment"] = {**merged.get("environment", {}), **value}
            else:
                merged[key] = value
    return out


def test_compose_tls_overlay_encrypts_every_link(tmp_path):
    pem_dir = Path(_tls_pem(tmp_path / "tls")["ca_file"]).parent
    base = interpolate(yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"])
    overlay = interpolate(yaml.safe_load((DOCKER / "compose.tls.yaml").read_text())["services"])
    services = compose_merge(base, overlay)
    assert set(overlay) == set(services) == {"scheduler", "worker", "runner"}
    for svc in services.values():
        assert "./tls:/tls:ro" in svc["volumes"] and any(v.endswith(":/job") for v in svc["volumes"])
        assert svc["environment"] == {"OMP_NUM_THREADS": "1", "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    want = (str(pem_dir / "ca.crt"), str(pem_dir / "tls.crt"), str(pem_dir / "tls.key"))
    for role in ("scheduler", "worker"):
        argv = [a.replace("/tls/", f"{pem_dir}/") for a in services[role]["command"]]
        params = check_dask_command(argv)
        assert (params["tls_ca_file"], params["tls_cert"], params["tls_key"]) == want, role
    assert check_dask_command([a.replace("/tls/", f"{pem_dir}/") for a in services["scheduler"]["command"]])[
        "protocol"] == "tls"
    worker = check_dask_command([a.replace("/tls/", f"{pem_dir}/") for a in services["worker"]["command"]])
    assert worker["scheduler"] == "tls://scheduler:8786" and worker["nthreads"] == 1
    ns = check_privcube_run(services["runner"]["command"])
    assert ns.scheduler_address == "tls://scheduler:8786" and ns.config == "/job/config.yaml"
    # everything else is the base file's
    for role in ("scheduler", "worker", "runner"):
        for key in set(base[role]) - {"command", "volumes", "environment"}:
            assert services[role][key] == base[role][key]


# ----------------------------------------------------------------------------------------------- hpc
@pytest.mark.parametrize("spec, key", [
    ({"queu": "x"}, "queu"),
    ({"job_mem": "4G", "type": "pbs"}, "job_mem"),
    ({"resource_spec": "select=1", "type": "slurm"}, "resource_spec"),
    ({"scheduler_options": {"hots": "x"}}, "scheduler_options.hots"),
    ({"adapt": {"max": 3}}, "adapt.max"),
    ({"walltime": 7200}, "walltime"),
    ({"memory": "lots"}, "memory"),
    ({"processes": 16}, "processes"),
    ({"cores": 0}, "cores"),
    ({"jobs": 2, "adapt": {"maximum_jobs": 3}}, "adapt"),
    ({"job_extra_directives": "--exclusive"}, "job_extra_directives"),
])
def test_bad_hpc_keys_raise_config_error_naming_the_key(spec, key):
    base = {"type": "slurm", "cores": 8, "memory": "16GB"}
    with pytest.raises(ConfigError) as e:
        hpc.validate_hpc_spec({**base, **spec})
    assert key in str(e.value)


def test_hpc_requires_cores_and_memory():
    with pytest.raises(ConfigError, match=r"cluster\.cores"):
        hpc.validate_hpc_spec({"type": "slurm", "memory": "8GB"})
    with pytest.raises(ConfigError, match=r"cluster\.memory"):
        hpc.validate_hpc_spec({"type": "pbs", "cores": 4})


def test_hpc_scaling():
    assert hpc.validate_hpc_spec({**SLURM})[2] == {"jobs": 1}
    assert hpc.validate_hpc_spec({**SLURM, "jobs": 4})[2] == {"jobs": 4}
    assert hpc.validate_hpc_spec({**SLURM, "adapt": {"maximum_jobs": 5}})[2] == \
        {"adapt": {"minimum_jobs": 0, "maximum_jobs": 5}}


def test_slurm_job_script_content():
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    script = hpc.job_script(SLURM, scheduler_address="tcp://10.0.0.1:8786")
    lines = script.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    directives = [ln for ln in lines if ln.startswith("#SBATCH")]
    for d in ("#SBATCH -J privcube-w", "#SBATCH -p normal", "#SBATCH -A proj42", "#SBATCH --cpus-per-task=8",
              "#SBATCH -t 02:00:00", "#SBATCH --exclusive", "#SBATCH --constraint=cpu"):
        assert d in directives
    assert any(re.fullmatch(r"#SBATCH --mem=\d+G", d) for d in directives)
    assert "module load python/3.11" in lines
    (cmd,) = [ln for ln in lines if "distributed.cli.dask_worker" in ln]
    argv = shlex.split(cmd)
    assert argv[1:3] == ["-m", "distributed.cli.dask_worker"]
    params = dask_cli("worker", argv[3:])  # the worker module behind `dask worker` accepts the line
    assert params["scheduler"] == "tcp://10.0.0.1:8786"
    assert params["nthreads"] == 4 and params["n_workers"] == "2" and params["nanny"] is True
    # the job's private work folder (made under local_directory by the prologue), dashboard on loopback
    assert params["local_directory"] == "$PRIVCUBE_LOCAL_DIR" and params["dashboard_address"] == "127.0.0.1:0"
    assert lines.index("umask 077") < lines.index("module load python/3.11")
    assert any('mktemp -d "/scratch/$USER/privcube-dask-' in ln for ln in lines)
    assert not re.search(r"\bdask-(worker|scheduler)\b", script.replace("#SBATCH -J", ""))


def _prologue_script(spec: dict[str, Any], body: str) -> str:
    """A worker job script for ``spec`` with its worker command replaced by ``body``."""
    lines = hpc.job_script(spec).splitlines()
    return "\n".join([*(ln for ln in lines if "distributed.cli.dask_worker" not in ln), body]) + "\n"


def test_worker_job_gets_a_private_work_folder_removed_at_exit(tmp_path):
    """The job script's prologue, run by bash as Slurm would: a 0o700 folder privcube-dask-JOBID-* under
    local_directory, created with umask 077, and deleted when the script ends (normally or by SIGTERM)."""
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    spec = {**SLURM, "local_directory": str(tmp_path / "spill"), "job_script_prologue": []}
    env = {**os.environ, "SLURM_JOB_ID": "77"}
    body = 'stat -c %a "$PRIVCUBE_LOCAL_DIR"; echo "$PRIVCUBE_LOCAL_DIR"; touch "$PRIVCUBE_LOCAL_DIR/spilled"'
    r = subprocess.run(["bash", "-c", _prologue_script(spec, body)], capture_output=True, text=True, env=env,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    mode, folder = r.stdout.split()
    assert mode == "700" and Path(folder).parent == tmp_path / "spill"
    assert Path(folder).name.startswith("privcube-dask-77-") and not Path(folder).exists()
    # cancelled (scancel signals every process of the job): the folder goes too
    proc = subprocess.Popen(["bash", "-c", _prologue_script(spec, 'sleep 60 & echo "$PRIVCUBE_LOCAL_DIR"; wait')],
                            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir()
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)
    assert proc.returncode == 143 and not folder.exists()


def test_worker_module_runs_on_installed_distributed():
    r = subprocess.run([sys.executable, "-m", "distributed.cli.dask_worker", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--scheduler-file" in r.stdout


def test_job_script_matches_slurmcluster_job_script():
    """Our scheduler-less job_script is what a started SLURMCluster would submit."""
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    cluster = hpc.jobqueue_cluster_from_spec(
        {**SLURM, "jobs": 0, "scheduler_options": {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}})
    try:
        assert type(cluster).__name__ == "SLURMCluster"
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        theirs = cluster.job_script().replace("--name dummy-name", "--name SLURMCluster-0")
        ours = hpc.job_script(SLURM, scheduler_address=cluster.scheduler_address)
        assert ours == theirs
    finally:
        cluster.close()


def test_hpc_cli_prints_the_worker_job_script(capsys, monkeypatch, tmp_path):
    """The inspector takes the shipped examples as they are (security: {tls: auto} included)."""
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    monkeypatch.setenv("HOME", str(tmp_path))  # the examples' log_directory (~/.privcube-logs) is created
    assert hpc.main([str(HPC / "pbs-job.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/usr/bin/env bash") and "#PBS -q workq" in out
    assert "tls://<scheduler-address>:8786" in out and "--protocol tls://" in out
    assert "--tls-key ~/.privcube-tls/.dask-jobqueue.worker.key.XXXXXXXX" in out
    assert f"#PBS -e {tmp_path}/.privcube-logs/" in out and (os.stat(tmp_path / ".privcube-logs").st_mode & 0o777) == 0o700
    assert hpc.main([str(HPC / "slurm-job.yaml")]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH -p normal" in out and "--protocol tls://" in out
    insecure = tmp_path / "insecure.yaml"
    insecure.write_text(yaml.safe_dump({"cluster": {**SLURM, "allow_insecure": True}}))
    assert hpc.main([str(insecure)]) == 0
    assert "tcp://<scheduler-address>:8786" in capsys.readouterr().out
    assert hpc.main([str(K8S / "privcube-job.yaml")]) == 2
    assert "cluster.type" in capsys.readouterr().err


@pytest.mark.cluster
def test_slurm_cluster_on_a_real_batch_system():
    """Needs sbatch and a partition given in PRIVCUBE_TEST_SLURM_QUEUE; submits one worker job."""
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    from distributed import Client

    queue = os.environ.get("PRIVCUBE_TEST_SLURM_QUEUE")
    if not queue or not shutil.which("sbatch"):
        pytest.skip("set PRIVCUBE_TEST_SLURM_QUEUE on a machine with sbatch")
    cluster = hpc.jobqueue_cluster_from_spec({"type": "slurm", "queue": queue, "cores": 1, "memory": "2GB",
                                              "walltime": "00:10:00", "jobs": 1})
    try:
        with Client(cluster) as client:
            client.wait_for_workers(1, timeout=600)
            assert client.submit(sum, [1, 2, 3]).result() == 6
    finally:
        cluster.close()


def test_pbs_job_script_content():
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    spec = {**SLURM, "type": "pbs", "job_extra_directives": ["-l place=scatter"],
            "resource_spec": "select=1:ncpus=8:mem=30GB"}
    script = hpc.job_script(spec)
    for d in ("#PBS -q normal", "#PBS -A proj42", "#PBS -l select=1:ncpus=8:mem=30GB",
              "#PBS -l walltime=02:00:00", "#PBS -l place=scatter", "#PBS -N privcube-w"):
        assert d in script.splitlines()
    assert "-m distributed.cli.dask_worker tcp://<scheduler-address>:8786" in script


def test_hpc_extra_missing_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"privcube\[hpc\]"):
        hpc.job_script(SLURM)


def test_jobqueue_yaml_uses_dask_jobqueue_keys():
    djq = pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    defaults = yaml.safe_load((Path(djq.__file__).parent / "jobqueue.yaml").read_text())["jobqueue"]
    ours = yaml.safe_load((HPC / "jobqueue.yaml").read_text())["jobqueue"]
    assert set(ours) == {"slurm", "pbs"}
    for kind, section in ours.items():
        unknown = set(section) - set(defaults[kind])
        assert not unknown, f"jobqueue.{kind}: {sorted(unknown)} are not dask-jobqueue keys"


def test_example_configs_validate():
    from privcube.config import TOP_KEYS

    for f in (HPC / "slurm-job.yaml", HPC / "pbs-job.yaml", K8S / "privcube-job.yaml"):
        raw = yaml.safe_load(f.read_text())
        assert set(raw) <= TOP_KEYS, f
        if raw["cluster"]["type"] == "kubernetes":
            validate_kubernetes_spec(raw["cluster"])
        else:
            hpc.validate_hpc_spec(raw["cluster"])


def test_sbatch_runner_script():
    path = HPC / "privcube-slurm.sbatch"
    text = path.read_text()
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert text.startswith("#!/usr/bin/env bash\n#SBATCH")
    assert '-m dask scheduler --scheduler-file "$SCHED_FILE"' in text
    assert '-m dask worker --scheduler-file "$SCHED_FILE"' in text
    assert re.search(r'-m privcube run "\$CONFIG" --out "\$OUT" --scheduler-file "\$SCHED_FILE"', text)
    assert "srun" in text and "wait_for_workers" in text and "trap stop_all EXIT" in text
    # spill space is job-private and owner-only, and removed on every node at exit
    assert re.search(r"^umask 077$", text, re.M)
    assert 'LOCAL_BASE=${PRIVCUBE_LOCAL_DIR:-${TMPDIR:-/tmp}}' in text
    assert 'mktemp -d "$1/privcube-$2-XXXXXXXX"' in text and '--local-directory "$dir"' in text
    assert 'rm -rf "$dir"' in text
    assert not re.search(r"\bdask-(worker|scheduler)\b", text)
    r = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "usage" in r.stderr
    # TLS: the config's security.tls files go to scheduler and workers as well
    assert '--protocol tls --tls-ca-file "${TLS[0]}" --tls-cert "${TLS[1]}" --tls-key "${TLS[2]}"' in text
    assert 'WORKER_ARGS+=(--tls-ca-file "${TLS[0]}" --tls-cert "${TLS[1]}" --tls-key "${TLS[2]}")' in text


def test_sbatch_runner_python_must_import_privcube(tmp_path):
    """PRIVCUBE_PYTHON that cannot import privcube: one line, exit 2, nothing started. Without it, the
    interpreter of the `privcube` command on PATH is used (the config is then read: its error shows)."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text(yaml.safe_dump({"cluster": {"security": {"tls": "auto"}}}))
    base = {k: v for k, v in os.environ.items() if k != "PRIVCUBE_PYTHON"}
    base.update(PRIVCUBE_LAUNCHER="local", PRIVCUBE_SHARED_DIR=str(tmp_path / "shared"))
    r = subprocess.run(["bash", str(HPC / "privcube-slurm.sbatch"), str(cfg), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, env={**base, "PRIVCUBE_PYTHON": "false"})
    assert r.returncode == 2 and r.stderr.strip() == "privcube-slurm: PRIVCUBE_PYTHON=false cannot import privcube"
    venv_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # as with an activated venv
    r = subprocess.run(["bash", str(HPC / "privcube-slurm.sbatch"), str(cfg), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, env={**base, "PATH": venv_path})
    assert r.returncode == 2 and "'auto' cannot be shared" in r.stderr, r.stderr
    assert not (tmp_path / "shared").exists()


def test_tls_auto_works_with_the_core_dependencies():
    """`security: {tls: auto}` needs cryptography: it is a core dependency, not only a test one."""
    import tomllib

    from privcube.graphs.cluster.security import security_from_spec

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"cryptography\b", d) for d in deps)
    sec = security_from_spec({"tls": "auto"})
    assert sec.require_encryption and "BEGIN CERTIFICATE" in sec.tls_ca_file


def test_sbatch_runner_refuses_tls_auto(tmp_path):
    """Temporary certificates live in one process: the sbatch runner cannot share them with its workers."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text(yaml.safe_dump({"cluster": {"security": {"tls": "auto"}}}))
    env = {**os.environ, "PRIVCUBE_LAUNCHER": "local", "PRIVCUBE_PYTHON": sys.executable,
           "PRIVCUBE_SHARED_DIR": str(tmp_path / "shared")}
    r = subprocess.run(["bash", str(HPC / "privcube-slurm.sbatch"), str(cfg), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "'auto' cannot be shared" in r.stderr
    assert not (tmp_path / "shared").exists() and not (tmp_path / "out").exists()  # nothing started


# ------------------------------------------------------------------------------------------ hpc TLS
def test_hpc_plain_scheduler_is_refused_before_any_job_is_submitted(monkeypatch):
    """A plain-text jobqueue scheduler off loopback: refused once it listens, before sbatch/qsub runs."""
    from privcube.graphs.cluster.handle import resolve_cluster

    events: list[str] = []

    class FakeJobqueueCluster:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs
            self.scheduler_address = "tcp://10.0.0.5:8786"
            events.append("started")

            self.worker_spec: dict[str, Any] = {}

        def new_worker_spec(self) -> dict[str, Any]:
            return {f"job-{len(self.worker_spec)}": {}}

        async def _correct_state(self) -> None:
            events.append(f"submit {len(self.worker_spec)}")

        def sync(self, fn: Any) -> Any:
            import asyncio

            return asyncio.run(fn())

        def close(self) -> None:
            events.append("closed")

    monkeypatch.setattr(hpc, "_jobqueue", lambda kind: (FakeJobqueueCluster, None))
    handle = resolve_cluster({"type": "slurm", "cores": 2, "memory": "4GB", "jobs": 3})
    with pytest.raises(ConfigError, match=r"10\.0\.0\.5.*allow_insecure"), handle:
        pass
    assert events == ["started", "closed"] and handle.cluster is None
    events.clear()
    from privcube.graphs.cluster.handle import ClusterHandle

    monkeypatch.setattr(ClusterHandle, "_connect", lambda self, cluster, ckw: "client")
    monkeypatch.setattr(hpc, "wait_for_first_worker", lambda cluster, client: events.append(f"wait {client}"))
    with resolve_cluster({"type": "slurm", "cores": 2, "memory": "4GB", "jobs": 3, "allow_insecure": True}) as c:
        assert c == "client"
    assert events == ["started", "submit 3", "wait client", "closed"]


def test_hpc_job_script_with_tls_files(tmp_path):
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    from privcube.graphs.cluster.security import security_from_spec

    pem = _tls_pem(tmp_path / "tls")
    sec = security_from_spec({"tls": pem})
    script = hpc.job_script(SLURM, scheduler_address="tls://10.0.0.1:8786", security=sec)
    (cmd,) = [ln for ln in script.splitlines() if "distributed.cli.dask_worker" in ln]
    params = dask_cli("worker", shlex.split(cmd)[3:])
    assert params["scheduler"] == "tls://10.0.0.1:8786" and params["protocol"] == "tls://"
    assert (params["tls_ca_file"], params["tls_cert"], params["tls_key"]) == (pem["ca_file"], pem["cert"], pem["key"])
    assert "tls://<scheduler-address>:8786" in hpc.job_script(SLURM, security=sec)
    # tls: auto - the files dask-jobqueue writes into shared_temp_directory when the cluster starts
    script = hpc.job_script({**SLURM, "shared_temp_directory": "/home/me/.tls", "security": {"tls": "auto"}})
    for key in ("ca-file /home/me/.tls/.dask-jobqueue.worker.ca_file", "cert /home/me/.tls/.dask-jobqueue.worker.cert",
                "key /home/me/.tls/.dask-jobqueue.worker.key"):
        assert f"--tls-{key}.XXXXXXXX" in script


def test_slurm_tls_worker_job_joins_over_tls(tmp_path):
    """`security: {tls: auto}` on a SLURMCluster: the worker job script, run here instead of by sbatch,
    joins the scheduler over TLS with the certificate dask-jobqueue wrote (0o600) into shared_temp_directory;
    a client without the certificate is turned away."""
    pytest.importorskip("dask_jobqueue", reason="optional extra 'hpc'")
    from distributed import Client

    from privcube.graphs.cluster.handle import resolve_cluster

    certs = tmp_path / "certs"
    certs.mkdir(mode=0o700)
    spec = {"type": "slurm", "cores": 1, "memory": "1GB", "jobs": 0, "shared_temp_directory": str(certs),
            "local_directory": str(tmp_path / "spill"),
            "scheduler_options": {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},
            "worker_extra_args": ["--host", "127.0.0.1", "--no-dashboard"], "security": {"tls": "auto"}}
    handle = resolve_cluster(spec)
    proc = None
    with handle as client:
        address = handle.cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        script = handle.cluster.job_script()
        (cmd,) = [ln for ln in script.splitlines() if "distributed.cli.dask_worker" in ln]
        argv = shlex.split(cmd)
        params = dask_cli("worker", argv[3:])
        assert params["scheduler"] == address and params["protocol"] == "tls://"
        for key in ("tls_ca_file", "tls_cert", "tls_key"):
            f = Path(params[key])
            assert f.parent == certs and (os.stat(f).st_mode & 0o777) == 0o600
        try:
            # the whole script, run by bash as the batch job would (its prologue makes the work folder)
            proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            client.wait_for_workers(1, timeout=120)
            (worker,) = client.scheduler_info()["workers"]
            assert worker.startswith("tls://127.0.0.1:")
            assert client.submit(sum, [1, 2, 3]).result() == 6
            (local_dir,) = client.run(lambda dask_worker: dask_worker.local_directory).values()
            assert Path(local_dir).is_relative_to(tmp_path / "spill")
            with pytest.raises(OSError):  # no certificate, plain text: refused
                Client(address.replace("tls://", "tcp://"), timeout="3s")
        finally:
            if proc is not None:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=30)
    assert handle.cluster is None
    assert not list((tmp_path / "spill").iterdir())  # the job's private folder went with it


# ------------------------------------------------------------------- rendered TLS pods, run locally
def _pod_env(container: dict[str, Any], namespace: str) -> dict[str, str]:
    """A container's env as Kubernetes would set it: fieldRef namespace, then $(VAR) expansion in order."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "valueFrom" in e:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            env[e["name"]] = namespace
        else:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
    return env


def _replace(argv: list[str], pairs: dict[tuple[str, str], tuple[str, ...]]) -> list[str]:
    """Replace adjacent (flag, value) pairs of ``argv`` by the given tokens (checking each pair is there)."""
    out, i = [], 0
    seen = set()
    while i < len(argv):
        pair = tuple(argv[i:i + 2])
        if pair in pairs:
            out += pairs[pair]
            seen.add(pair)
            i += 2
        else:
            out.append(argv[i])
            i += 1
    assert seen == set(pairs), set(pairs) - seen
    return out


@pytest.mark.slow  # ~20 s: a scheduler, two workers and a CLI run as separate processes
def test_rendered_tls_daskjob_runs_end_to_end_on_loopback(tmp_path):
    """The rendered DaskJob's own commands, environment and shipped config, run here on 127.0.0.1 instead
    of in pods: `dask scheduler --protocol tls ...`, two `dask worker`s reaching it through our tls://
    DASK_SCHEDULER_ADDRESS, and the runner's `privcube run` with the ConfigMap's config. Only host names,
    ports, dashboards and the mount points are changed; every TLS option is used as rendered. Plain-text
    and wrong-CA clients are refused."""
    import json
    import signal
    import socket
    import time

    import numpy as np
    import pandas as pd
    from distributed import Client, Security

    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 3000), "b": rng.integers(0, 4, 3000)})
    (tmp_path / "data").mkdir()
    frame.to_parquet(tmp_path / "data" / "p.parquet", index=False)
    (tmp_path / "domain.json").write_text(json.dumps({"a": 3, "b": 4}))
    pem = _tls_pem(tmp_path / "local-certs")
    spec = {"type": "kubernetes", "image": "x:1", "name": "e2e", "n_workers": 2, "worker_threads": 1,
            "security": {"tls": pem}, "job": {"out": "/data/runs/r1"}}
    job_config = {"data": {"path": str(tmp_path / "data"), "domain": str(tmp_path / "domain.json")},
                  "mechanism": {"name": "residual-planner"}, "workload": [{"kway": 2}],
                  "privacy": {"epsilon": 1.0, "delta": 1e-6}, "cluster": spec}
    secret, cm, job = render_kubernetes_manifests(spec, job_config=job_config, kinds=["DaskJob"])
    # the Secret and the ConfigMap as the pods see them
    mount, etc = tmp_path / "etc-privcube-tls", tmp_path / "etc-privcube"
    mount.mkdir()
    etc.mkdir()
    for k, v in secret["stringData"].items():
        (mount / k).write_text(v)
    (etc / "config.yaml").write_text(cm["data"]["config.yaml"].replace("/etc/privcube-tls", str(mount)))

    def local(argv: list[str]) -> list[str]:
        assert argv[0] in ("dask", "privcube")
        return [sys.executable, "-m", *[a.replace("/etc/privcube-tls", str(mount)).replace("/etc/privcube", str(etc))
                                        for a in argv]]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = containers(job)
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        with open(tmp_path / log, "wb") as fh:
            p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, **env})
        procs.append(p)
        return p

    try:
        sched_env = _pod_env(c["scheduler"], "ns1")
        start(local(_replace(c["scheduler"]["args"], {("--host", "0.0.0.0"): ("--host", "127.0.0.1"),
                                                      ("--port", "8786"): ("--port", str(port)),
                                                      ("--dashboard-address", ":8787"): ("--no-dashboard",)})),
              sched_env, "scheduler.log")
        worker_env = _pod_env(c["worker"], "ns1")
        assert worker_env["DASK_SCHEDULER_ADDRESS"] == "tls://e2e-scheduler.ns1.svc.cluster.local:8786"
        address = f"tls://127.0.0.1:{port}"  # the Service name does not resolve here
        worker_env["DASK_SCHEDULER_ADDRESS"] = address
        for i in range(2):
            argv = _replace(c["worker"]["args"], {("--name", "$(DASK_WORKER_NAME)"): ("--name", f"w{i}"),
                                                  ("--dashboard", "--dashboard-address"): ("--no-dashboard",)})
            argv = _replace(argv, {("--no-dashboard", "8788"): ("--no-dashboard", "--host", "127.0.0.1")})
            start(local(argv), worker_env, f"worker{i}.log")
        client_sec = Security(tls_ca_file=str(mount / "ca.crt"), tls_client_cert=str(mount / "tls.crt"),
                              tls_client_key=str(mount / "tls.key"), require_encryption=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                with Client(address, security=client_sec, timeout="5s") as client:
                    client.wait_for_workers(2, timeout=120)
                    workers = list(client.scheduler_info()["workers"])
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
                time.sleep(0.5)
        assert len(workers) == 2 and all(w.startswith("tls://127.0.0.1:") for w in workers)
        with pytest.raises(OSError):
            Client(f"tcp://127.0.0.1:{port}", timeout="3s")  # plain text: refused
        with pytest.raises(OSError):
            Client(address, security=Security.temporary(), timeout="3s")  # a certificate of another CA

        runner_env = _pod_env(c["job"], "ns1")
        runner_env["DASK_SCHEDULER_ADDRESS"] = address
        out = tmp_path / "out"
        argv = [a.replace("$(DASK_SCHEDULER_ADDRESS)", address) for a in c["job"]["args"]]
        argv = _replace(argv, {("--out", "/data/runs/r1"): ("--out", str(out))})
        r = subprocess.run(local(argv), env={**os.environ, **runner_env}, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (out / ".complete").exists()
        ledger = json.loads((out / "ledger.json").read_text())
        assert ledger["spent"]["rho"] > 0
        with Client(address, security=client_sec, timeout="10s") as client:
            executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
        assert sum(executed.values()) > 0  # the counting ran on the TLS workers
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def test_operator_pod_builders_keep_our_tls_scheduler_address(tmp_path):
    """The installed operator's own controller functions build the worker Deployment and the runner Pod
    from our DaskJob: they add DASK_WORKER_NAME, but our tls:// DASK_SCHEDULER_ADDRESS stays the only one
    (without TLS they inject their plain tcp:// address instead)."""
    ctl = pytest.importorskip("dask_kubernetes.operator.controller.controller", reason="optional extra 'kubernetes'")
    base = {k: v for k, v in SPEC.items() if k != "allow_insecure"}
    for spec, scheme in (({**base, "tls_secret": "certs"}, "tls"), ({**base, "allow_insecure": True}, "tcp")):
        job = render_kubernetes_manifests(spec, kinds=["DaskJob"])[-1]
        cluster = job["spec"]["cluster"]["spec"]
        worker = ctl.build_worker_deployment_spec("default", "dp", "dp-job", "abc123", cluster["worker"]["spec"], {}, {})
        runner = ctl.build_job_pod_spec("dp-job", "dp-job", "dp", job["spec"]["job"]["spec"], {}, {})
        sched = ctl.build_scheduler_deployment_spec("dp-job", cluster["scheduler"]["spec"], {}, {})
        for pod, role in ((worker["spec"]["template"]["spec"], "worker"), (runner["spec"], "runner")):
            (c,) = pod["containers"]
            addresses = [e for e in c["env"] if e["name"] == "DASK_SCHEDULER_ADDRESS"]
            assert len(addresses) == 1, role
            assert addresses[0]["value"].startswith(f"{scheme}://dp-job-scheduler."), (role, addresses)
            if scheme == "tls":
                names = [e["name"] for e in c["env"]]
                assert names.index("PRIVCUBE_POD_NAMESPACE") < names.index("DASK_SCHEDULER_ADDRESS")
                assert any(v.get("secret", {}).get("secretName") == "certs" for v in pod["volumes"])
        assert any(e["name"] == "DASK_WORKER_NAME" for e in worker["spec"]["template"]["spec"]["containers"][0]["env"])
        (sc,) = sched["spec"]["template"]["spec"]["containers"]
        assert ("--protocol" in sc["args"]) == (scheme == "tls")
