"""Job configuration: load YAML/JSON, validate every key, resolve paths, domain, workload, budget.

Top-level keys: ``data`` (``path``; ``schema`` for raw data or ``domain`` as a path to a
``{column: size}`` JSON or an inline mapping), ``domain`` (inline, for planning without data),
``mechanism`` (``name`` + parameters), ``workload``, ``privacy``, ``output``, ``cluster``,
``noise_sampler`` (``continuous``, the default, or ``discrete``: exact discrete Gaussian/Laplace).
``output``: ``labels`` (decoded label columns, default true), ``answers`` / ``zarr`` (a path or
fsspec URL that receives a copy of the run's answers / tensor store, see
``privcube.storage.outputs.publish_outputs``; the run directory itself is ``--out``).
Relative paths -- data, schema, ``output.answers``/``output.zarr``, a local cluster's
``local_directory``, ``scheduler_file`` and TLS files -- are resolved against the config file's
folder. Nothing here reads private data.
"""
from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from privcube.domain import Domain
from privcube.errors import ConfigError, PrivcubeError
from privcube.privacy.budget import PrivacyBudget
from privcube.workload import Workload, parse_workload
from privcube.yaml_io import load_yaml

TOP_KEYS = {"data", "domain", "mechanism", "workload", "privacy", "output", "cluster", "noise_sampler", "synthesize", "postprocess"}
SYNTHESIZE_KEYS = {"rows", "estimator", "chunk_size"}
DATA_KEYS = {"path", "schema", "domain", "compress", "format", "tables", "links"}
OUTPUT_KEYS = {"labels", "zarr", "answers"}


@dataclass
class JobConfig:
    """A validated job: everything a run needs except the data itself."""

    raw: dict[str, Any]
    base_dir: Path
    domain: Domain
    schema: Any  # privcube.storage.schema.Schema, or None when only a domain is known
    data_path: str | None
    mechanism: str
    mechanism_params: dict[str, Any]
    workload: Workload
    budget: PrivacyBudget
    cluster: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)
    compress: bool = False
    noise_sampler: str = "continuous"
    synthesize: dict[str, Any] | None = None  # {rows: int | "auto", estimator, chunk_size}: records from the answers
    postprocess: Any = None  # privcube.postprocess.PostprocessSpec, or None when `postprocess: none`

    def resolved(self) -> dict[str, Any]:
        """The resolved config as written to ``config.yaml`` in the run directory."""
        out = copy.deepcopy(self.raw)
        if self.data_path is not None:
            out.setdefault("data", {})["path"] = self.data_path
        out["mechanism"] = {"name": self.mechanism, **self.mechanism_params}
        out["resolved"] = {
            "domain": self.domain.to_dict(),
            "privacy": self.budget.to_dict(),
            "workload_groups": len(self.workload),
        }
        if self.schema is not None and hasattr(self.schema, "to_dict"):
            out["resolved"]["schema"] = self.schema.to_dict()
        return out


def read_config_file(path: str | Path) -> tuple[dict[str, Any], Path]:
    """Parse a YAML (or JSON) config file into a mapping; errors name the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e}") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return raw, p.resolve().parent


def load_config(source: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None,
                need_data: bool = True) -> JobConfig:
    """Load and validate a job config from a file or a mapping."""
    if isinstance(source, Mapping):
        raw, base = copy.deepcopy(dict(source)), Path(base_dir or ".").resolve()
    else:
        raw, base = read_config_file(source)
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)}; known: {sorted(TOP_KEYS)}")

    mech = raw.get("mechanism")
    if isinstance(mech, str):
        mech = {"name": mech}
    if not isinstance(mech, Mapping) or "name" not in mech:
        raise ConfigError("mechanism: expected a mapping with a 'name' (e.g. {name: residual-planner})")
    name = mech["name"]
    params = {k: v for k, v in mech.items() if k != "name"}
    if name == "relational":
        raise ConfigError("mechanism 'relational' runs two tables and their links: it has no single-table "
                          "plan; use `privcube run` (see privcube.relational_job)")
    from privcube.mechanisms import REGISTRY

    if name not in REGISTRY:
        raise ConfigError(f"mechanism: unknown name {name!r}; known: {', '.join(REGISTRY)}")

    data = raw.get("data")
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError("data: expected a mapping with 'path' and 'schema' or 'domain'")
    data = dict(data or {})
    bad = set(data) - DATA_KEYS
    if bad:
        raise ConfigError(f"data: unknown key(s) {sorted(bad)}; known: {sorted(DATA_KEYS)}")

    schema, domain = _resolve_schema(raw, data, base)
    data_path = None
    if "path" in data:
        data_path = _resolve_path(str(data["path"]), base)
    elif need_data:
        raise ConfigError("data.path is missing: a run needs the data's location")

    if "workload" not in raw:
        raise ConfigError("workload is missing")
    if isinstance(raw["workload"], Workload):  # built in Python (all_kway, hybrid, ...): kept as its config
        raw["workload"] = raw["workload"].to_config()
    workload = parse_workload(raw["workload"], domain)

    if "privacy" not in raw:
        raise ConfigError("privacy is missing (epsilon, epsilon + delta, or rho)")
    budget = PrivacyBudget.from_config(raw["privacy"])

    cluster = parse_cluster(raw, base)
    output = raw.get("output") or {}
    if not isinstance(output, Mapping):
        raise ConfigError("output: expected a mapping")
    bad = set(output) - OUTPUT_KEYS
    if bad:
        raise ConfigError(f"output: unknown key(s) {sorted(bad)}; known: {sorted(OUTPUT_KEYS)}")
    output = dict(output)
    for key in ("answers", "zarr"):  # published copies of the run's answers / tensor store
        if key in output:
            if not isinstance(output[key], str) or not output[key].strip():
                raise ConfigError(f"output.{key} must be a path or URL, got {output[key]!r}")
            output[key] = _resolve_path(os.path.expanduser(output[key]), base)
    compress = data.get("compress", False)
    if not isinstance(compress, bool):
        raise ConfigError(f"data.compress must be true or false, got {compress!r}")

    noise_sampler = parse_noise_sampler(raw)
    synthesize = parse_synthesize(raw.get("synthesize"), workload)
    from privcube.postprocess.spec import PostprocessSpec, parse_postprocess

    postprocess = parse_postprocess(raw["postprocess"]) if "postprocess" in raw else PostprocessSpec()

    return JobConfig(raw=raw, base_dir=base, domain=domain, schema=schema, data_path=data_path,
                     mechanism=name, mechanism_params=params, workload=workload, budget=budget,
                     cluster=dict(cluster), output=dict(output), compress=compress,
                     noise_sampler=noise_sampler, synthesize=synthesize, postprocess=postprocess)


def parse_synthesize(spec: Any, workload: Workload) -> dict[str, Any] | None:
    """``synthesize``: synthetic records from the run's marginal answers (post-processing, no budget).

    ``true`` or a row count or ``{rows: N | auto, estimator: tree | mbi, chunk_size: N}``; ``auto`` rows =
    the noisy record count the answers imply. The workload must hold at least one marginal group.
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        spec = {}
    elif isinstance(spec, int) and not isinstance(spec, bool):
        spec = {"rows": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"synthesize: expected true, a row count or {{rows, estimator, chunk_size}}, got {spec!r}")
    bad = set(spec) - SYNTHESIZE_KEYS
    if bad:
        raise ConfigError(f"synthesize: unknown key(s) {sorted(bad)}; known: {sorted(SYNTHESIZE_KEYS)}")
    out = {"rows": spec.get("rows", "auto"), "estimator": spec.get("estimator", "tree"),
           "chunk_size": spec.get("chunk_size", 100_000)}
    rows = out["rows"]
    if rows != "auto" and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
        raise ConfigError(f"synthesize.rows must be a non-negative integer or 'auto', got {rows!r}")
    cs = out["chunk_size"]
    if isinstance(cs, bool) or not isinstance(cs, int) or cs < 1:
        raise ConfigError(f"synthesize.chunk_size must be a positive integer, got {cs!r}")
    if out["estimator"] not in ("tree", "mbi"):
        raise ConfigError(f"synthesize.estimator must be 'tree' or 'mbi', got {out['estimator']!r}")
    if not any(g.is_marginal and g.attributes for g in workload):
        raise ConfigError("synthesize: the workload has no marginal group to build records from; add one, "
                          "e.g. {kway: 2}")
    return out


def parse_cluster(raw: Mapping[str, Any], base: Path | None = None) -> dict[str, Any]:
    """The ``cluster`` section as a mapping (a bare name means ``{type: name}``); keys are checked later.

    With ``base`` (the config file's folder), paths read on this machine are resolved against it like
    every other relative path of the config: ``local_directory`` of a ``local`` cluster,
    ``scheduler_file`` and the ``security.tls`` files. Paths of remote clusters (kubernetes, slurm,
    pbs) are left as written: they are read on other machines.
    """
    cluster = raw.get("cluster") or {}
    if isinstance(cluster, str):
        cluster = {"type": cluster}
    if not isinstance(cluster, Mapping):
        raise ConfigError("cluster: expected a mapping such as {type: local}")
    cluster = copy.deepcopy(dict(cluster))
    if base is None:
        return cluster
    local_keys = {"local": ("local_directory",), "scheduler-file": ("scheduler_file",)}
    for key in local_keys.get(str(cluster.get("type", "none")), ()):
        if isinstance(cluster.get(key), str):
            cluster[key] = _resolve_path(os.path.expanduser(cluster[key]), base)
    tls = cluster.get("security", {}).get("tls") if isinstance(cluster.get("security"), Mapping) else None
    if isinstance(tls, Mapping):
        cluster["security"] = {**cluster["security"], "tls": {
            k: _resolve_path(os.path.expanduser(v), base) if isinstance(v, str) else v for k, v in tls.items()}}
    return cluster


def parse_noise_sampler(raw: Mapping[str, Any]) -> str:
    """``noise_sampler``: ``continuous`` (default) or ``discrete`` (exact discrete Gaussian/Laplace)."""
    noise_sampler = raw.get("noise_sampler", "continuous")
    if noise_sampler not in ("continuous", "discrete"):
        raise ConfigError(f"noise_sampler must be 'continuous' or 'discrete', got {noise_sampler!r}")
    return noise_sampler


def _resolve_path(p: str, base: Path) -> str:
    if "://" in p or Path(p).is_absolute():
        return p
    return str((base / p).resolve()) if not any(ch in p for ch in "*?[") else str(base / p)


def _resolve_schema(raw: Mapping[str, Any], data: Mapping[str, Any], base: Path) -> tuple[Any, Domain]:
    """Schema (or None) and Domain from data.schema, data.domain or a top-level inline domain."""
    from privcube.storage.schema import Schema, load_schema

    given = [k for k in ("schema", "domain") if k in data]
    if len(given) > 1:
        raise ConfigError("data: give either 'schema' or 'domain', not both")
    try:
        if given:
            spec = data[given[0]]
            if isinstance(spec, str):
                spec = _resolve_path(spec, base)
            schema = load_schema(spec)
            if "domain" in raw:
                raise ConfigError("give the domain once: either data.schema/data.domain or top-level domain")
            return schema, schema.domain
        if "domain" in raw:
            spec = raw["domain"]
            if isinstance(spec, str):
                spec = _resolve_path(spec, base)
                domain = Domain.load(spec)
            elif isinstance(spec, Mapping):
                domain = Domain.from_mapping(spec)
            else:
                raise ConfigError("domain: expected {attribute: size} or a path to a domain JSON")
            return Schema.from_domain(domain), domain
    except PrivcubeError:
        raise
    except (OSError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the schema/domain: {e}") from None
    raise ConfigError("no domain: give data.schema, data.domain or a top-level inline domain")
