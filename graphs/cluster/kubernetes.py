"""Kubernetes: the config's ``cluster: {type: kubernetes, ...}`` section as dask-operator resources.

``render_kubernetes_manifests(spec)`` builds plain dicts (no cluster, no dask-kubernetes needed):
a ``DaskCluster`` (long-lived scheduler + workers) and a ``DaskJob`` (the same cluster plus a runner
pod that executes ``privcube run CONFIG --out DIR --scheduler-address $(DASK_SCHEDULER_ADDRESS)``;
the operator injects that variable and deletes the cluster when the runner exits). They are
alternatives: apply one. ``kube_cluster_from_spec(spec)`` starts the ``DaskCluster`` from the laptop
through ``dask_kubernetes.operator.KubeCluster(custom_cluster_spec=...)``.

The pods run ``dask scheduler`` / ``dask worker``: the installed dask-kubernetes still emits the
hyphenated ``dask-scheduler`` / ``dask-worker`` commands, which distributed >= 2026.6 removed, so
the specs are always rendered here rather than by ``dask_kubernetes.make_cluster_spec``.

Spec keys (``cluster.<key>``): ``image`` (required), ``name`` (default ``privcube``), ``namespace``,
``n_workers`` (default 2), ``resources`` and ``scheduler_resources`` ({requests, limits}),
``env`` ({NAME: value} or a Kubernetes env list), ``worker_threads``, ``worker_memory_limit``,
``image_pull_policy``, ``image_pull_secrets``, ``service_account``, ``node_selector``,
``tolerations``, ``volumes``, ``volume_mounts``, ``idle_timeout``, ``scheduler_service_type``,
``resource_timeout``, ``job`` ({config, out, args, resources}: the DaskJob runner), ``tls_secret``,
and ``security: {tls, allow_insecure}`` / ``allow_insecure``.

Transport. With TLS (``security: {tls: auto}``, ``security: {tls: {ca_file, cert, key}}`` or
``tls_secret: NAME``) every pod mounts a Secret with ``ca.crt``, ``tls.crt`` and ``tls.key`` at
``/etc/privcube-tls`` (read-only): the scheduler listens on ``tls://`` (``dask scheduler --protocol
tls --tls-ca-file ... --tls-cert ... --tls-key ...``), workers and the runner reach it at
``tls://NAME-scheduler.<pod namespace>.svc.cluster.local:8786`` (our own ``DASK_SCHEDULER_ADDRESS``:
the operator only injects its plain ``tcp://`` one where a container has none) and every process
sets ``DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION``. ``auto`` and the files are rendered into that
Secret (``<name>-tls``, or ``tls_secret``) here; ``tls_secret`` alone names an existing Secret (e.g.
made by cert-manager, or ``kubectl create secret generic NAME --from-file=ca.crt --from-file=tls.crt
--from-file=tls.key``). distributed checks the peer's certificate against the CA, not its host name.

Without TLS the pods talk plain ``tcp://`` over the cluster network. privcube refuses a plain
non-loopback scheduler unless the config says ``allow_insecure: true``; rendering a DaskJob with its
config therefore requires TLS or that key, which is then shipped as the runner's ``cluster:
{allow_insecure: true}``. From a laptop, ``KubeCluster``'s scheduler address is checked the same way
(a port-forward to ``localhost`` passes). ``KubeCluster`` itself (dask-kubernetes 2026.3) always
talks plain ``tcp://`` to its scheduler (hard-coded address scheme, no ``Security`` for its own
connection), so the ``kubernetes`` target refuses TLS: render a DaskJob instead.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.params import REQUIRED, Param
from privcube.graphs.cluster.kind import ClusterKind

API_VERSION = "kubernetes.dask.org/v1"
SCHEDULER_PORT = 8786
DASHBOARD_PORT = 8787
WORKER_DASHBOARD_PORT = 8788
CONFIG_MOUNT = "/etc/privcube"
DEFAULT_JOB_CONFIG = f"{CONFIG_MOUNT}/config.yaml"
DEFAULT_JOB_OUT = "/privcube/runs/run"
TLS_MOUNT = "/etc/privcube-tls"  # not under CONFIG_MOUNT: no mount point inside a read-only ConfigMap volume
TLS_FILES = {"ca_file": "ca.crt", "cert": "tls.crt", "key": "tls.key"}  # security.tls key -> Secret key
_TLS_VOLUME = "privcube-tls"
_SECRET_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
# The scheduler Service is "<name>-scheduler" and must fit in 63 characters (as dask-kubernetes checks).
_NAME = re.compile(r"^(?=.{1,53}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")

#: the options of a kubernetes section (``cluster.<key>``)
KUBERNETES_OPTIONS: dict[str, Param] = {
    "name": Param("privcube", "DNS label", "the DaskCluster's name (from a laptop, default: privcube-<random>)"),
    "image": Param(REQUIRED, "image", "the container image with privcube installed (see deploy/docker)"),
    "namespace": Param(None, "namespace", "the Kubernetes namespace (default: the current one)"),
    "n_workers": Param(2, "int >= 0", "worker pods (--workers sets it)"),
    "resources": Param(None, "{requests, limits}", "each worker pod's resources"),
    "scheduler_resources": Param(None, "{requests, limits}", "the scheduler pod's resources"),
    "env": Param(None, "{NAME: value} | env list", "environment variables of every pod"),
    "worker_threads": Param(None, "int >= 1", "threads of each worker"),
    "worker_memory_limit": Param(None, "size such as 6GB | auto", "each worker's memory limit"),
    "image_pull_policy": Param("IfNotPresent", " | ".join(_PULL_POLICIES), "when the image is pulled"),
    "image_pull_secrets": Param(None, "list of text", "Secrets holding the registry's credentials"),
    "service_account": Param(None, "text", "the pods' service account"),
    "node_selector": Param(None, "{label: value}", "nodes the pods may run on"),
    "tolerations": Param(None, "list of mappings", "the pods' tolerations"),
    "volumes": Param(None, "list of mappings", "volumes of every pod (e.g. the data)"),
    "volume_mounts": Param(None, "list of mappings", "where the volumes are mounted"),
    "idle_timeout": Param(0, "seconds", "the scheduler stops after this long idle (0: never)"),
    "scheduler_service_type": Param("ClusterIP", " | ".join(_SERVICE_TYPES), "the scheduler's Service type"),
    "resource_timeout": Param(None, "seconds", "how long KubeCluster waits for the resources"),
    "job": Param(None, "{config, out, args, resources}", "the DaskJob runner: config path, run folder, extra "
                                                         "arguments, resources"),
    "tls_secret": Param(None, "Secret name", "an existing Secret with ca.crt, tls.crt and tls.key: TLS"),
}
KUBERNETES_KEYS = frozenset({"type", "security", "allow_insecure", *KUBERNETES_OPTIONS})
JOB_KEYS = frozenset({"config", "out", "args", "resources"})


@dataclass(frozen=True)
class KubeSpec:
    """A validated ``cluster: {type: kubernetes}`` section with defaults filled in."""

    image: str
    name: str = "privcube"
    name_given: bool = False
    namespace: str | None = None
    n_workers: int = 2
    resources: dict[str, dict[str, str]] | None = None
    scheduler_resources: dict[str, dict[str, str]] | None = None
    env: list[dict[str, Any]] = field(default_factory=list)
    worker_threads: int | None = None
    worker_memory_limit: str | None = None
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = field(default_factory=list)
    service_account: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    idle_timeout: int = 0
    scheduler_service_type: str = "ClusterIP"
    resource_timeout: int | None = None
    job_config: str = DEFAULT_JOB_CONFIG
    job_out: str = DEFAULT_JOB_OUT
    job_args: list[str] = field(default_factory=list)
    job_resources: dict[str, dict[str, str]] | None = None
    tls: str | None = None  # "auto", "files" (rendered into the Secret), "secret" (an existing one), or None
    tls_secret: str | None = None  # the Secret mounted at TLS_MOUNT when tls is set
    tls_files: dict[str, str] | None = None  # security.tls paths on this machine (tls == "files")

    def tls_paths(self) -> dict[str, str]:
        """``security.tls`` as seen inside the pods: the mounted Secret's files."""
        return {k: f"{TLS_MOUNT}/{v}" for k, v in TLS_FILES.items()}


# ------------------------------------------------------------------------------------- validation
def _check_transport(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``security``/``allow_insecure``/``tls_secret`` of a kubernetes cluster: ``{tls, tls_secret, tls_files}``."""
    from privcube.graphs.cluster.security import allow_insecure_from_spec, security_from_spec

    allow = spec.get("allow_insecure", False)
    if not isinstance(allow, bool):
        raise _fail("allow_insecure", f"must be true or false, got {allow!r}")
    sec = spec.get("security")
    if isinstance(sec, str):
        sec = {"tls": sec}
    if sec is not None and not isinstance(sec, Mapping):
        raise _fail("security", f"expected a mapping such as {{tls: auto}}, got {sec!r}")
    allow_insecure_from_spec(sec)  # type check of security.allow_insecure
    out: dict[str, Any] = {}
    secret = spec.get("tls_secret")
    if secret is not None:
        if not isinstance(secret, str) or not _SECRET_NAME.match(secret):
            raise _fail("tls_secret", f"expected the name of a Kubernetes Secret, got {secret!r}")
        out.update(tls="secret", tls_secret=secret)
    tls = sec.get("tls") if sec else None
    if tls in (None, False):
        return out
    if tls is True or tls == "auto":
        out["tls"] = "auto"
        return out
    try:
        security_from_spec({"tls": tls})  # every key present, files readable, a loadable PEM pair
    except ConfigError as e:
        raise ConfigError(f"cluster.{e} (kubernetes)") from None
    out.update(tls="files", tls_files={k: str(tls[k]) for k in TLS_FILES})
    return out


def allows_insecure(spec: Mapping[str, Any]) -> bool:
    """Whether the cluster section says ``allow_insecure: true`` (top level or under ``security``)."""
    sec = spec.get("security")
    return spec.get("allow_insecure") is True or (isinstance(sec, Mapping) and sec.get("allow_insecure") is True)


def _fail(key: str, msg: str) -> ConfigError:
    """A ConfigError naming ``cluster.<key>``."""
    return ConfigError(f"cluster.{key} (kubernetes): {msg}")


def _str(key: str, value: Any) -> str:
    """A non-empty string option."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, f"expected a non-empty string, got {value!r}")
    return value


def _int(key: str, value: Any, minimum: int) -> int:
    """An integer option of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _quantity(key: str, value: Any) -> str:
    """A Kubernetes quantity (``"2"``, ``"500m"``, ``"4Gi"``, 2, 0.5) as a string."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _fail(key, f"expected a quantity such as '2', '500m' or '4Gi', got {value!r}")
    text = str(value)
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?([eE][0-9]+|[mkMGTPE]|[KMGTPE]i)?", text):
        raise _fail(key, f"{text!r} is not a Kubernetes quantity (e.g. '2', '500m', '4Gi')")
    return text


def _resources(key: str, value: Any) -> dict[str, dict[str, str]] | None:
    """``{requests: {cpu, memory, ...}, limits: {...}}`` with quantities as strings."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _fail(key, "expected a mapping with 'requests' and/or 'limits'")
    out: dict[str, dict[str, str]] = {}
    for part, amounts in value.items():
        if part not in ("requests", "limits"):
            raise _fail(f"{key}.{part}", "unknown key; allowed: ['limits', 'requests']")
        if not isinstance(amounts, Mapping):
            raise _fail(f"{key}.{part}", "expected a mapping such as {cpu: '2', memory: 8Gi}")
        out[part] = {str(r): _quantity(f"{key}.{part}.{r}", q) for r, q in amounts.items()}
    return out


def _env(value: Any) -> list[dict[str, Any]]:
    """``{NAME: value}`` or a Kubernetes env list, as a Kubernetes env list."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        items = [{"name": k, "value": v} for k, v in value.items()]
    elif isinstance(value, Sequence) and not isinstance(value, str):
        items = [dict(v) if isinstance(v, Mapping) else v for v in value]
    else:
        raise _fail("env", "expected {NAME: value} or a list of {name, value}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _fail(f"env[{i}]", f"expected {{name, value}}, got {item!r}")
        if not _ENV_NAME.match(item["name"]):
            raise _fail(f"env.{item['name']}", "not a valid environment variable name")
        bad = set(item) - {"name", "value", "valueFrom"}
        if bad:
            raise _fail(f"env.{item['name']}", f"unknown key(s) {sorted(bad)}; allowed: name, value, valueFrom")
        if "value" in item:
            v = item["value"]
            if isinstance(v, (Mapping, list)) or v is None:
                raise _fail(f"env.{item['name']}", f"value must be a scalar, got {v!r}")
            item["value"] = str(v).lower() if isinstance(v, bool) else str(v)
        out.append(item)
    return out


def _mappings(key: str, value: Any) -> list[dict[str, Any]]:
    """A list of mappings (tolerations, volumes, volume mounts), copied."""
    if value is None:
        return []
    if not isinstance(value, Sequence) or isinstance(value, str) or \
            not all(isinstance(v, Mapping) for v in value):
        raise _fail(key, "expected a list of mappings")
    return [copy.deepcopy(dict(v)) for v in value]


def _strings(key: str, value: Any) -> list[str]:
    """A list of strings."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise _fail(key, f"expected a list of strings, got {value!r}")
    return list(value)


def _choice(key: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise _fail(key, f"expected one of {list(choices)}, got {value!r}")
    return str(value)


def validate_kubernetes_spec(spec: Mapping[str, Any] | None) -> KubeSpec:
    """Check a ``cluster: {type: kubernetes}`` section; every error names the key at fault."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"cluster: expected a mapping such as {{type: kubernetes, image: ...}}, got {spec!r}")
    if spec.get("type", "kubernetes") != "kubernetes":
        raise _fail("type", f"expected 'kubernetes', got {spec.get('type')!r}")
    unknown = sorted(set(spec) - KUBERNETES_KEYS)
    if unknown:
        raise ConfigError(f"cluster: unknown key {unknown[0]!r} for cluster type 'kubernetes'; "
                          f"allowed: {sorted(KUBERNETES_KEYS)}")
    if "image" not in spec:
        raise _fail("image", "missing: the container image with privcube installed (see deploy/docker)")
    transport = _check_transport(spec)
    kw: dict[str, Any] = {"image": _str("image", spec["image"])}
    if "name" in spec:
        name = _str("name", spec["name"])
        if not _NAME.match(name):
            raise _fail("name", f"{name!r} must be lowercase letters, digits and '-', at most 53 characters")
        kw["name"], kw["name_given"] = name, True
    if spec.get("namespace") is not None:
        ns = _str("namespace", spec["namespace"])
        if not _LABEL.match(ns):
            raise _fail("namespace", f"{ns!r} is not a valid Kubernetes namespace name")
        kw["namespace"] = ns
    if "n_workers" in spec:
        kw["n_workers"] = _int("n_workers", spec["n_workers"], 0)
    kw["resources"] = _resources("resources", spec.get("resources"))
    kw["scheduler_resources"] = _resources("scheduler_resources", spec.get("scheduler_resources"))
    kw["env"] = _env(spec.get("env"))
    if spec.get("worker_threads") is not None:
        kw["worker_threads"] = _int("worker_threads", spec["worker_threads"], 1)
    if spec.get("worker_memory_limit") is not None:
        m = spec["worker_memory_limit"]
        if isinstance(m, bool) or not isinstance(m, (str, int)):
            raise _fail("worker_memory_limit", f"expected bytes or a string such as '6GB', got {m!r}")
        if isinstance(m, str) and m != "auto":
            from dask.utils import parse_bytes

            try:
                parse_bytes(m)
            except ValueError:
                raise _fail("worker_memory_limit", f"{m!r} is not a size such as '6GB' or 'auto'") from None
        kw["worker_memory_limit"] = str(m)
    if "image_pull_policy" in spec:
        kw["image_pull_policy"] = _choice("image_pull_policy", spec["image_pull_policy"], _PULL_POLICIES)
    kw["image_pull_secrets"] = _strings("image_pull_secrets", spec.get("image_pull_secrets"))
    if spec.get("service_account") is not None:
        kw["service_account"] = _str("service_account", spec["service_account"])
    ns_sel = spec.get("node_selector") or {}
    if not isinstance(ns_sel, Mapping):
        raise _fail("node_selector", "expected a mapping {label: value}")
    kw["node_selector"] = {str(k): str(v) for k, v in ns_sel.items()}
    for key in ("tolerations", "volumes", "volume_mounts"):
        kw[key] = _mappings(key, spec.get(key))
    if "idle_timeout" in spec:
        kw["idle_timeout"] = _int("idle_timeout", spec["idle_timeout"], 0)
    if "scheduler_service_type" in spec:
        kw["scheduler_service_type"] = _choice("scheduler_service_type", spec["scheduler_service_type"],
                                               _SERVICE_TYPES)
    if spec.get("resource_timeout") is not None:
        kw["resource_timeout"] = _int("resource_timeout", spec["resource_timeout"], 1)
    job = spec.get("job") or {}
    if not isinstance(job, Mapping):
        raise _fail("job", "expected a mapping {config, out, args, resources}")
    bad = sorted(set(job) - JOB_KEYS)
    if bad:
        raise _fail(f"job.{bad[0]}", f"unknown key; allowed: {sorted(JOB_KEYS)}")
    if "config" in job:
        kw["job_config"] = _str("job.config", job["config"])
    if "out" in job:
        kw["job_out"] = _str("job.out", job["out"])
    kw["job_args"] = _strings("job.args", job.get("args"))
    kw["job_resources"] = _resources("job.resources", job.get("resources"))
    if transport.get("tls"):
        kw["tls"] = transport["tls"]
        kw["tls_files"] = transport.get("tls_files")
        kw["tls_secret"] = transport.get("tls_secret") or f"{kw.get('name', 'privcube')}-tls"
    return KubeSpec(**kw)


def tls_requested(spec: Mapping[str, Any]) -> bool:
    """Whether a kubernetes cluster section asks for TLS (``security.tls`` or ``tls_secret``)."""
    sec = spec.get("security")
    tls = sec if isinstance(sec, str) else (sec.get("tls") if isinstance(sec, Mapping) else None)
    return spec.get("tls_secret") is not None or tls not in (None, False)


# ---------------------------------------------------------------------------------------- rendering
def _tls_args(ks: KubeSpec | None) -> list[str]:
    """``--tls-ca-file/--tls-cert/--tls-key`` pointing at the mounted Secret (none without TLS)."""
    if ks is None or not ks.tls:
        return []
    p = ks.tls_paths()
    return ["--tls-ca-file", p["ca_file"], "--tls-cert", p["cert"], "--tls-key", p["key"]]


def scheduler_args(ks: KubeSpec | None = None) -> list[str]:
    """Container args of the scheduler pod (``dask scheduler``, distributed >= 2026.6); tls:// with TLS."""
    args = ["dask", "scheduler", "--host", "0.0.0.0", "--port", str(SCHEDULER_PORT),
            "--dashboard-address", f":{DASHBOARD_PORT}"]
    if ks is not None and ks.tls:
        args += ["--protocol", "tls", *_tls_args(ks)]
    return args


def worker_args(ks: KubeSpec) -> list[str]:
    """Container args of a worker pod; the operator sets DASK_WORKER_NAME, DASK_SCHEDULER_ADDRESS (or we do)."""
    args = ["dask", "worker", "--name", "$(DASK_WORKER_NAME)", "--dashboard",
            "--dashboard-address", str(WORKER_DASHBOARD_PORT)]
    if ks.worker_threads is not None:
        args += ["--nthreads", str(ks.worker_threads)]
    if ks.worker_memory_limit is not None:
        args += ["--memory-limit", ks.worker_memory_limit]
    return args + _tls_args(ks)


def scheduler_tls_address(ks: KubeSpec) -> str:
    """The scheduler's in-cluster tls:// address (namespace from the pod's own, via the downward API)."""
    return f"tls://{ks.name}-scheduler.$(PRIVCUBE_POD_NAMESPACE).svc.cluster.local:{SCHEDULER_PORT}"


def _tls_env(ks: KubeSpec, *, address: bool) -> list[dict[str, Any]]:
    """Env of a TLS pod: encryption required and, for workers and the runner, the tls:// scheduler address."""
    env: list[dict[str, Any]] = [{"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"}]
    if address:
        env += [{"name": "PRIVCUBE_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "DASK_SCHEDULER_ADDRESS", "value": scheduler_tls_address(ks)}]
    return env


def _tls_volume(ks: KubeSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mounts, volumes) for the TLS Secret; empty without TLS."""
    if not ks.tls:
        return [], []
    return ([{"name": _TLS_VOLUME, "mountPath": TLS_MOUNT, "readOnly": True}],
            [{"name": _TLS_VOLUME, "secret": {"secretName": ks.tls_secret, "defaultMode": 0o444}}])


def runner_args(ks: KubeSpec) -> list[str]:
    """Container args of the DaskJob runner pod: the job itself, against the job's own scheduler."""
    return ["privcube", "run", ks.job_config, "--out", ks.job_out,
            "--scheduler-address", "$(DASK_SCHEDULER_ADDRESS)", "--quiet", *ks.job_args]


def _container(ks: KubeSpec, name: str, args: list[str], resources: dict[str, Any] | None,
               ports: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """One container of a pod template (with TLS: the Secret mounted and the TLS environment)."""
    c: dict[str, Any] = {"name": name, "image": ks.image, "imagePullPolicy": ks.image_pull_policy,
                         "args": args}
    env = copy.deepcopy(ks.env)
    if ks.tls:
        ours = _tls_env(ks, address=name != "scheduler")
        names = {e["name"] for e in ours}
        env = [e for e in env if e["name"] not in names] + ours
        mounts = mounts + _tls_volume(ks)[0]
    if env:
        c["env"] = env
    if resources:
        c["resources"] = copy.deepcopy(resources)
    if ports:
        c["ports"] = ports
    if mounts:
        c["volumeMounts"] = mounts
    return c


def _pod(ks: KubeSpec, container: dict[str, Any], volumes: list[dict[str, Any]],
         restart_policy: str | None = None) -> dict[str, Any]:
    """A PodSpec around one container, with the spec's scheduling options."""
    pod: dict[str, Any] = {"containers": [container]}
    volumes = volumes + _tls_volume(ks)[1]
    if restart_policy:
        pod["restartPolicy"] = restart_policy
    if ks.service_account:
        pod["serviceAccountName"] = ks.service_account
    if ks.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in ks.image_pull_secrets]
    if ks.node_selector:
        pod["nodeSelector"] = dict(ks.node_selector)
    if ks.tolerations:
        pod["tolerations"] = copy.deepcopy(ks.tolerations)
    if volumes:
        pod["volumes"] = volumes
    return pod


def _port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def _cluster_spec(ks: KubeSpec) -> dict[str, Any]:
    """The ``spec`` of a DaskCluster (also embedded in a DaskJob)."""
    sched = _container(ks, "scheduler", scheduler_args(ks), ks.scheduler_resources or ks.resources,
                       [_port("tcp-comm", SCHEDULER_PORT), _port("http-dashboard", DASHBOARD_PORT)],
                       copy.deepcopy(ks.volume_mounts))
    sched["readinessProbe"] = {"httpGet": {"port": "http-dashboard", "path": "/health"},
                               "initialDelaySeconds": 0, "periodSeconds": 1, "timeoutSeconds": 300}
    sched["livenessProbe"] = {"httpGet": {"port": "http-dashboard", "path": "/health"},
                              "initialDelaySeconds": 15, "periodSeconds": 20}
    worker = _container(ks, "worker", worker_args(ks), ks.resources,
                        [_port("http-dashboard", WORKER_DASHBOARD_PORT)], copy.deepcopy(ks.volume_mounts))
    return {
        "idleTimeout": ks.idle_timeout,
        "worker": {"replicas": ks.n_workers, "spec": _pod(ks, worker, copy.deepcopy(ks.volumes))},
        "scheduler": {
            "spec": _pod(ks, sched, copy.deepcopy(ks.volumes)),
            "service": {
                "type": ks.scheduler_service_type,
                "selector": {"dask.org/cluster-name": ks.name, "dask.org/component": "scheduler"},
                "ports": [
                    {"name": "tcp-comm", "protocol": "TCP", "port": SCHEDULER_PORT, "targetPort": "tcp-comm"},
                    {"name": "http-dashboard", "protocol": "TCP", "port": DASHBOARD_PORT,
                     "targetPort": "http-dashboard"},
                ],
            },
        },
    }


def _metadata(ks: KubeSpec, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "privcube"}}
    if ks.namespace:
        meta["namespace"] = ks.namespace
    return meta


def daskcluster_manifest(spec: Mapping[str, Any] | KubeSpec) -> dict[str, Any]:
    """The ``DaskCluster`` resource for a cluster spec."""
    ks = spec if isinstance(spec, KubeSpec) else validate_kubernetes_spec(spec)
    return {"apiVersion": API_VERSION, "kind": "DaskCluster", "metadata": _metadata(ks, ks.name),
            "spec": _cluster_spec(ks)}


def daskjob_manifest(spec: Mapping[str, Any] | KubeSpec, *, config_map: str | None = None) -> dict[str, Any]:
    """The ``DaskJob`` resource: the cluster plus a runner pod executing ``privcube run``.

    With ``config_map``, that ConfigMap is mounted read-only at ``/etc/privcube`` in the runner.
    """
    ks = spec if isinstance(spec, KubeSpec) else validate_kubernetes_spec(spec)
    mounts, volumes = copy.deepcopy(ks.volume_mounts), copy.deepcopy(ks.volumes)
    if config_map is not None:
        mounts.append({"name": "privcube-config", "mountPath": CONFIG_MOUNT, "readOnly": True})
        volumes.append({"name": "privcube-config", "configMap": {"name": config_map}})
    runner = _container(ks, "job", runner_args(ks), ks.job_resources, [], mounts)
    return {"apiVersion": API_VERSION, "kind": "DaskJob", "metadata": _metadata(ks, ks.name),
            "spec": {"job": {"spec": _pod(ks, runner, volumes, restart_policy="Never")},
                     "cluster": {"spec": _cluster_spec(ks)}}}


def render_kubernetes_manifests(spec: Mapping[str, Any], *, job_config: Mapping[str, Any] | None = None,
                                kinds: Sequence[str] = ("DaskCluster", "DaskJob")) -> list[dict[str, Any]]:
    """DaskCluster and/or DaskJob resources (alternatives: apply one) for a ``cluster`` section.

    With ``job_config`` (the whole job config as a mapping), a ConfigMap ``<name>-config`` holding
    it (its ``cluster`` section replaced by what the runner needs) as ``config.yaml`` comes first and
    the DaskJob runner reads it from ``/etc/privcube``. Data paths in it must be reachable from the
    pods (URL or volume). With ``security.tls`` (auto or files) the TLS Secret comes first of all:
    it holds a private key, so apply the output straight away (``| kubectl apply -f -``) rather than
    keeping it in a file, or give ``tls_secret`` alone to use a Secret that already exists.
    """
    import yaml

    ks = validate_kubernetes_spec(spec)
    unknown = [k for k in kinds if k not in ("DaskCluster", "DaskJob")]
    if unknown or not kinds:
        raise ConfigError(f"kinds: expected DaskCluster and/or DaskJob, got {list(kinds)!r}")
    out: list[dict[str, Any]] = []
    if ks.tls in ("auto", "files"):
        out.append(tls_secret_manifest(ks))
    config_map = None
    if job_config is not None and "DaskJob" in kinds:
        if ks.job_config != DEFAULT_JOB_CONFIG:
            raise _fail("job.config", f"must stay {DEFAULT_JOB_CONFIG!r} when the config is shipped "
                                      "as a ConfigMap")
        # The runner is pointed at its scheduler by --scheduler-address; the shipped config drops
        # its cluster section so the pod can never try to start a cluster of its own. With TLS it
        # carries the mounted certificate paths; without, the runner reaches the scheduler at
        # tcp://NAME-scheduler.NAMESPACE.svc, which privcube refuses as plain text off loopback
        # unless the config allows it: that consent is shipped, and required.
        if ks.tls:
            runner_cluster: dict[str, Any] = {"security": {"tls": ks.tls_paths()}}
        elif allows_insecure(spec):
            runner_cluster = {"allow_insecure": True}
        else:
            raise _fail("allow_insecure", "the DaskJob's pods would talk plain tcp:// over the cluster network "
                                          "and privcube refuses that by default: set cluster.security.tls (auto "
                                          "or files) or cluster.tls_secret, or, on a network you trust "
                                          "(NetworkPolicy, an encrypting CNI or a service mesh with mTLS), "
                                          "cluster.allow_insecure: true")
        shipped = {k: v for k, v in dict(job_config).items() if k != "cluster"}
        shipped["cluster"] = runner_cluster
        config_map = f"{ks.name}-config"
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(ks, config_map),
                    "data": {"config.yaml": yaml.safe_dump(shipped, sort_keys=False)}})
    if "DaskCluster" in kinds:
        out.append(daskcluster_manifest(ks))
    if "DaskJob" in kinds:
        out.append(daskjob_manifest(ks, config_map=config_map))
    return out


def tls_secret_manifest(spec: Mapping[str, Any] | KubeSpec) -> dict[str, Any]:
    """The Secret (``ca.crt``, ``tls.crt``, ``tls.key``) the pods mount: fresh for ``auto``, else the files."""
    ks = spec if isinstance(spec, KubeSpec) else validate_kubernetes_spec(spec)
    if ks.tls == "auto":
        from distributed import Security

        sec = Security.temporary()  # one self-signed certificate, also its own CA
        data = {"ca.crt": sec.tls_ca_file, "tls.crt": sec.tls_worker_cert, "tls.key": sec.tls_worker_key}
    elif ks.tls == "files" and ks.tls_files:
        data = {}
        for key, name in TLS_FILES.items():
            path = ks.tls_files[key]
            try:
                with open(os.path.expanduser(path)) as fh:
                    data[name] = fh.read()
            except OSError as e:
                raise _fail(f"security.tls.{key}", f"cannot read {path}: {e.strerror or e}") from None
    else:
        raise _fail("security.tls", "no certificate to render: give security.tls (auto or files)")
    meta = _metadata(ks, str(ks.tls_secret))
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": data}


# --------------------------------------------------------------------------------------- KubeCluster
def kube_cluster_from_spec(spec: Mapping[str, Any], **kwargs: Any) -> Any:
    """Start (or connect to) the spec's DaskCluster with dask-kubernetes; returns a ``KubeCluster``.

    Without ``cluster.name`` a unique ``privcube-<random>`` name is used so runs never share a
    cluster by accident. ``kwargs`` pass through to ``KubeCluster`` (e.g. ``asynchronous``).
    """
    ks = validate_kubernetes_spec(spec)
    if ks.tls:
        raise _fail("security.tls", "dask-kubernetes' KubeCluster connects to its scheduler over plain tcp:// only; "
                                    "render a TLS DaskJob with 'python -m privcube.graphs.cluster.kubernetes CONFIG' instead")
    try:
        from dask_kubernetes.operator import KubeCluster
    except ImportError:
        raise ConfigError("cluster.type 'kubernetes' needs dask-kubernetes: "
                          "pip install 'privcube[kubernetes]'") from None
    if not ks.name_given:
        ks = dataclasses.replace(ks, name=f"privcube-{uuid.uuid4().hex[:8]}")
    manifest = daskcluster_manifest(ks)
    manifest["metadata"].pop("namespace", None)  # KubeCluster takes the namespace separately
    options: dict[str, Any] = {"custom_cluster_spec": manifest, "quiet": True}
    if ks.namespace:
        options["namespace"] = ks.namespace
    if ks.resource_timeout is not None:
        options["resource_timeout"] = ks.resource_timeout
    options.update(kwargs)
    return KubeCluster(**options)


class KubernetesKind(ClusterKind):
    """A DaskCluster started through dask-kubernetes' ``KubeCluster`` (plain tcp:// only: for TLS, render a
    DaskJob with ``python -m privcube.graphs.cluster.kubernetes CONFIG``)."""

    name = "kubernetes"
    description = ("a DaskCluster on Kubernetes started from here through dask-kubernetes (pip install "
                   "'privcube[kubernetes]'); python -m privcube.graphs.cluster.kubernetes renders a DaskJob")
    abilities = frozenset({"starts-workers", "workers-flag"})
    OPTIONS = KUBERNETES_OPTIONS

    def validate(self, options: dict[str, Any], security: Any = None) -> None:
        validate_kubernetes_spec({"type": self.name, **options, **({"security": security} if security is not None
                                                                   else {})})

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        return self.name, {**options, "n_workers": workers}

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        """TLS is refused: KubeCluster talks plain tcp:// to its scheduler."""
        if security is not None or tls_requested(options):
            raise ConfigError(
                "cluster.security.tls (kubernetes): dask-kubernetes' KubeCluster connects to its scheduler over "
                "plain tcp:// only, so privcube cannot start a TLS cluster from here; render a TLS DaskJob with "
                "'python -m privcube.graphs.cluster.kubernetes CONFIG | kubectl apply -f -' instead")

    def open(self, handle: Any) -> Any:
        from privcube.graphs.cluster.security import check_address_security, client_kwargs

        handle.cluster = kube_cluster_from_spec({"type": self.name, **handle.options})
        check_address_security(handle.cluster.scheduler_address, None, handle.allow_insecure)
        return handle._connect(handle.cluster, client_kwargs(handle.security))


def manifests_to_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """Multi-document YAML for ``kubectl apply -f -``; multi-line strings as literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump_all([dict(d) for d in docs], Dumper=_Dumper, sort_keys=False)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privcube.graphs.cluster.kubernetes CONFIG [--kind K] [--no-config-map]``: print manifests."""
    import argparse

    from privcube.core.errors import PrivcubeError
    from privcube.core.yaml_io import read_config_file

    p = argparse.ArgumentParser(prog="python -m privcube.graphs.cluster.kubernetes",
                                description="Render dask-operator resources for a job config.")
    p.add_argument("config", help="job config whose cluster section has type: kubernetes")
    p.add_argument("--kind", action="append", choices=["DaskCluster", "DaskJob"],
                   help="resource(s) to render (default: DaskJob with its ConfigMap)")
    p.add_argument("--no-config-map", action="store_true", help="do not ship the config as a ConfigMap")
    args = p.parse_args(argv)
    try:
        raw, _ = read_config_file(args.config)
        cluster = raw.get("cluster") or {}
        if not isinstance(cluster, Mapping) or cluster.get("type") != "kubernetes":
            raise ConfigError("cluster.type: expected 'kubernetes' to render Kubernetes resources")
        docs = render_kubernetes_manifests(cluster, kinds=args.kind or ["DaskJob"],
                                           job_config=None if args.no_config_map else raw)
    except PrivcubeError as e:
        print(f"privcube: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(manifests_to_yaml(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
