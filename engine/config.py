"""Job configuration: load YAML/JSON, validate every key, resolve paths, domain, workload, budget.

Top-level keys: ``data`` (``path``; ``schema`` for raw data or ``domain`` as a path to a
``{column: size}`` JSON or an inline mapping), ``domain`` (inline, for planning without data),
``mechanism`` (``name`` + parameters), ``workload``, ``privacy``, ``output``, ``cluster``,
``noise_sampler`` (``continuous``, the default, or ``discrete``: exact discrete Gaussian/Laplace),
``privacy_unit`` (``{id: COLUMN, max_rows: K}``: person-level privacy, see ``privcube.privacy.unit``).
``output``: ``labels`` (decoded label columns, default true), ``ci_level`` (level of every answer's
``ci_low``/``ci_high`` interval, default 0.95), ``answers`` / ``zarr`` (a path or
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

import numpy as np
import yaml

from privcube.core.domain import Domain
from privcube.core.config_files import RESOLVED_KEY, check_recorded, resolve_path
from privcube.core.errors import ConfigError, PrivcubeError
from privcube.privacy.budget import PrivacyBudget
from privcube.core.workload import Workload, parse_workload
from privcube.core.yaml_io import DuplicateKeyError, load_yaml, yaml_error_line
from privcube.storage.placement import FRAME_PLACEHOLDER

TOP_KEYS = {"data", "domain", "mechanism", "workload", "privacy", "output", "cluster", "noise_sampler", "synthesize",
            "privacy_unit", "postprocess"}
SYNTHESIZE_KEYS = {"rows", "estimator", "chunk_size", "max_cells"}
DATA_KEYS = {"path", "schema", "domain", "compress", "format", "tables", "links"}
OUTPUT_KEYS = {"labels", "zarr", "answers", "ci_level"}


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
    data_frame: Any = None  # a pandas/polars DataFrame given in Python instead of data.path (never serialised)
    privacy_unit: Any = None  # privcube.privacy.unit.PrivacyUnit: one person = rows sharing an id, at most K
    #: one-line warnings about settings that are valid but weak (e.g. a large delta); report.json and stderr
    warnings: list[str] = field(default_factory=list)

    @property
    def mechanism_budget(self) -> PrivacyBudget:
        """The budget mechanisms calibrate to: the person-level budget scaled to one row (ρ/K², ε/K) under a
        privacy unit of K rows, else the budget itself."""
        return self.budget if self.privacy_unit is None else self.privacy_unit.row_budget(self.budget)

    def resolved(self) -> dict[str, Any]:
        """The resolved config as written to ``config.yaml`` in the run directory: every path absolute, so
        the file can be passed back to ``privcube plan`` / ``run`` as it is, plus a ``resolved`` record
        (domain, privacy, schema) that loading it again verifies (see :func:`check_recorded`)."""
        out = copy.deepcopy(self.raw)
        if self.data_path is not None:
            out.setdefault("data", {})["path"] = self.data_path
        elif self.data_frame is not None:
            out.setdefault("data", {})["path"] = FRAME_PLACEHOLDER
        for holder in (out.get("data"), out):  # data.schema / data.domain / top-level domain given as paths
            if isinstance(holder, dict):
                for key in ("schema", "domain"):
                    if isinstance(holder.get(key), str):
                        holder[key] = resolve_path(holder[key], self.base_dir)
        if self.output:
            out["output"] = dict(self.output)
        if "cluster" in out:
            out["cluster"] = copy.deepcopy(self.cluster)
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
    except DuplicateKeyError as e:
        raise ConfigError(f"config file {str(p)!r}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {yaml_error_line(e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return raw, p.resolve().parent


def load_config(source: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None,
                need_data: bool = True) -> JobConfig:
    """Load and validate a job config from a file or a mapping. A run folder's ``config.yaml`` is accepted as
    it is: its ``resolved`` record is checked against the config resolved now, not read as input."""
    frame = None
    if isinstance(source, Mapping):
        source, frame = split_frame(source)  # a DataFrame in data.path is never deep-copied nor printed
        raw, base = copy.deepcopy(dict(source)), Path(base_dir or ".").resolve()
    elif isinstance(source, (str, os.PathLike)):
        raw, base = read_config_file(source)
    else:
        raise ConfigError(f"config: expected a file path, a mapping or a JobConfig, got a {type(source).__name__}")
    recorded = raw.pop(RESOLVED_KEY, None)  # a run folder's config.yaml: checked once the config is resolved
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    cfg = _load_checked(raw, base, need_data, frame)
    check_recorded(recorded, {"domain": cfg.domain.to_dict(), "privacy": cfg.budget.to_dict(),
                              "workload_groups": len(cfg.workload),
                              **({"schema": cfg.schema.to_dict()} if hasattr(cfg.schema, "to_dict") else {})})
    return cfg


def _load_checked(raw: dict[str, Any], base: Path, need_data: bool, frame: Any = None) -> JobConfig:
    """The body of :func:`load_config` once the top-level keys are known."""
    mech = raw.get("mechanism")
    if isinstance(mech, str):
        mech = {"name": mech}
    if not isinstance(mech, Mapping) or "name" not in mech:
        raise ConfigError("mechanism: expected a mapping with a 'name' (e.g. {name: residual-planner})")
    name = mech["name"]
    params = {k: v for k, v in mech.items() if k != "name"}
    if name == "relational":
        raise ConfigError("mechanism 'relational' runs two tables and their links: it has no single-table "
                          "plan; use `privcube run` (see privcube.relational.job)")
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
        data_path = data_paths(data["path"], base)
    elif frame is None and need_data:
        raise ConfigError("data.path is missing: a run needs the data's location")

    if "workload" not in raw:
        raise ConfigError("workload is missing")
    if isinstance(raw["workload"], Workload):  # built in Python (all_kway, hybrid, ...): kept as its config
        raw["workload"] = raw["workload"].to_config()
    workload = parse_workload(raw["workload"], domain)

    if "privacy" not in raw:
        raise ConfigError("privacy is missing (epsilon, epsilon + delta, or rho)")
    budget = PrivacyBudget.from_config(raw["privacy"])
    check_laplace_budget(name, params, raw["privacy"], budget)

    cluster = parse_cluster(raw, base)
    output = raw.get("output") or {}
    if not isinstance(output, Mapping):
        raise ConfigError("output: expected a mapping")
    bad = set(output) - OUTPUT_KEYS
    if bad:
        raise ConfigError(f"output: unknown key(s) {sorted(bad)}; known: {sorted(OUTPUT_KEYS)}")
    output = dict(output)
    if "ci_level" in output:  # level of every answer's ci_low/ci_high interval (default 0.95)
        from privcube.privacy.intervals import check_level

        output["ci_level"] = check_level(output["ci_level"])
    for key in ("answers", "zarr"):  # published copies of the run's answers / tensor store
        if key in output:
            if not isinstance(output[key], str) or not output[key].strip():
                raise ConfigError(f"output.{key} must be a path or URL, got {output[key]!r}")
            output[key] = resolve_path(os.path.expanduser(output[key]), base)
    compress = data.get("compress", False)
    if not isinstance(compress, bool):
        raise ConfigError(f"data.compress must be true or false, got {compress!r}")

    noise_sampler = parse_noise_sampler(raw)
    synthesize = parse_synthesize(raw.get("synthesize"), workload)
    from privcube.privacy.unit import parse_privacy_unit

    unit = parse_privacy_unit(raw.get("privacy_unit"), name, params)
    from privcube.postprocess.spec import PostprocessSpec, parse_postprocess

    postprocess = parse_postprocess(raw["postprocess"]) if "postprocess" in raw else PostprocessSpec()
    if name == "aim-grem" and "model_cells" not in params and postprocess is not None and postprocess.method == "pgm":
        # AIM's model-size filter at the published model's size, so the model holds every measurement
        params = {**params, "model_cells": postprocess.model_cells}

    from privcube.privacy.budget import budget_warnings

    return JobConfig(raw=raw, base_dir=base, domain=domain, schema=schema, data_path=data_path,
                     mechanism=name, mechanism_params=params, workload=workload, budget=budget,
                     cluster=dict(cluster), output=dict(output), compress=compress,
                     noise_sampler=noise_sampler, synthesize=synthesize, data_frame=frame,
                     privacy_unit=unit, postprocess=postprocess, warnings=budget_warnings(budget))


def check_laplace_budget(mechanism: str, params: Mapping[str, Any], privacy: Any, budget: PrivacyBudget) -> None:
    """Refuse ``noise: laplace`` (hdmm, eigen-design) with a budget given as ``{epsilon, delta}``.

    Laplace noise gives pure epsilon-DP and has no use for a delta; the only way to spend an (epsilon, delta)
    budget with it is through its zCDP reading rho(epsilon, delta) = eps'^2 / 2, i.e. Laplace at eps' (0.17 for
    epsilon 1, delta 1e-9): far noisier than the epsilon asked for, with nothing said. The user meant one of
    the two ways out the message names. ``{rho}`` budgets (Laplace at sqrt(2 rho), charged in rho) stay accepted."""
    import math

    if mechanism not in ("hdmm", "eigen-design") or params.get("noise") != "laplace":
        return
    if not (isinstance(privacy, Mapping) and "epsilon" in privacy and "delta" in privacy):
        return
    eps = budget.epsilon
    raise ConfigError(f"{mechanism}: noise: laplace gives pure epsilon-DP and has no use for privacy.delta; with "
                      f"{{epsilon: {eps:g}, delta: {budget.delta:g}}} it would be calibrated to the zCDP reading of "
                      f"(epsilon, delta), i.e. Laplace noise at epsilon {math.sqrt(2.0 * budget.rho):.2g}, not "
                      f"{eps:g}: give privacy: {{epsilon: {eps:g}}} alone (Laplace at epsilon {eps:g}, pure DP), or "
                      "remove noise: laplace (Gaussian noise uses the delta)")


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is an in-memory table privcube accepts as data: pandas, polars (eager or lazy)."""
    import pandas as pd

    if isinstance(obj, pd.DataFrame):
        return True
    cls = type(obj)
    return cls.__module__.split(".")[0] == "polars" and cls.__name__ in ("DataFrame", "LazyFrame")


def split_frame(source: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """``(config without the frame, frame or None)``: a DataFrame in ``data.path`` is taken out (shallowly)."""
    data = source.get("data")
    if not isinstance(data, Mapping) or not is_frame(data.get("path")):
        return dict(source), None
    rest = {k: v for k, v in data.items() if k != "path"}
    return {**source, "data": rest}, data["path"]


def data_paths(spec: Any, base: Path) -> str | list[str]:
    """``data.path``: one location (file, folder, glob, URL) or a non-empty list of them, resolved against
    ``base``; anything else is refused by its type only (never its contents, which may be data)."""
    if isinstance(spec, (str, os.PathLike)) and str(spec).strip():
        return resolve_path(os.path.expanduser(str(spec)), base)
    if isinstance(spec, (list, tuple)) and spec and all(
            isinstance(p, (str, os.PathLike)) and str(p).strip() for p in spec):
        paths = [resolve_path(os.path.expanduser(str(p)), base) for p in spec]
        return paths[0] if len(paths) == 1 else paths
    what = "an empty list" if isinstance(spec, (list, tuple)) and not spec else "an empty path" if isinstance(
        spec, (str, os.PathLike)) else (
        f"a list holding a {next(type(p).__name__ for p in spec if not isinstance(p, (str, os.PathLike)))}"
        if isinstance(spec, (list, tuple)) and any(not isinstance(p, (str, os.PathLike)) for p in spec)
        else f"a {type(spec).__name__}")
    raise ConfigError(f"data.path must be a path, URL or list of paths (or, from Python, a pandas or polars "
                      f"DataFrame), got {what}")


def parse_synthesize(spec: Any, workload: Workload) -> dict[str, Any] | None:
    """``synthesize``: synthetic records from the run's marginal answers (post-processing, no budget).

    ``true`` or a row count or ``{rows: N | auto, estimator: junction-tree | tree | mbi, chunk_size: N,
    max_cells: N}``; ``auto`` rows = the noisy record count the answers imply; ``max_cells`` is the
    junction tree's public cell budget. The workload must hold at least one marginal group.
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        spec = {}
    elif isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        spec = {"rows": int(spec)}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"synthesize: expected true, a row count or {{rows, estimator, chunk_size}}, got {spec!r}")
    bad = set(spec) - SYNTHESIZE_KEYS
    if bad:
        raise ConfigError(f"synthesize: unknown key(s) {sorted(bad)}; known: {sorted(SYNTHESIZE_KEYS)}")
    from privcube.synth.estimator import DEFAULT_ESTIMATOR, ESTIMATORS
    from privcube.synth.jt_fit import DEFAULT_MAX_CELLS

    out = {"rows": spec.get("rows", "auto"), "estimator": spec.get("estimator", DEFAULT_ESTIMATOR),
           "chunk_size": spec.get("chunk_size", 100_000), "max_cells": spec.get("max_cells", DEFAULT_MAX_CELLS)}
    rows = out["rows"] = int(out["rows"]) if isinstance(out["rows"], np.integer) else out["rows"]
    if isinstance(rows, float) and rows.is_integer() and rows >= 0:
        raise ConfigError(f"synthesize.rows must be a whole number written as an integer, got {rows:g} (a float); "
                          f"write {int(rows)}")
    if rows != "auto" and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
        raise ConfigError(f"synthesize.rows must be a non-negative integer or 'auto', got {rows!r}")
    from privcube.synth.records import MAX_RECORDS

    if rows != "auto" and rows > MAX_RECORDS:
        raise ConfigError(f"synthesize.rows = {rows:,} is above privcube's limit of {MAX_RECORDS:,} records "
                          "(gigabytes of Parquet and minutes of writing at the limit); ask for fewer")
    cs = out["chunk_size"]
    if isinstance(cs, bool) or not isinstance(cs, int) or cs < 1:
        raise ConfigError(f"synthesize.chunk_size must be a positive integer, got {cs!r}")
    mc = out["max_cells"]
    if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
        raise ConfigError(f"synthesize.max_cells must be a positive integer, got {mc!r}")
    if out["estimator"] not in ESTIMATORS:
        raise ConfigError(f"synthesize.estimator must be one of {', '.join(ESTIMATORS)}; got {out['estimator']!r}")
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
            cluster[key] = resolve_path(os.path.expanduser(cluster[key]), base)
    tls = cluster.get("security", {}).get("tls") if isinstance(cluster.get("security"), Mapping) else None
    if isinstance(tls, Mapping):
        cluster["security"] = {**cluster["security"], "tls": {
            k: resolve_path(os.path.expanduser(v), base) if isinstance(v, str) else v for k, v in tls.items()}}
    return cluster


def parse_noise_sampler(raw: Mapping[str, Any]) -> str:
    """``noise_sampler``: ``continuous`` (default) or ``discrete`` (exact discrete Gaussian/Laplace)."""
    noise_sampler = raw.get("noise_sampler", "continuous")
    if noise_sampler not in ("continuous", "discrete"):
        raise ConfigError(f"noise_sampler must be 'continuous' or 'discrete', got {noise_sampler!r}")
    return noise_sampler


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
                spec = resolve_path(spec, base)
            schema = load_schema(spec)
            if "domain" in raw:
                raise ConfigError("give the domain once: either data.schema/data.domain or top-level domain")
            return schema, schema.domain
        if "domain" in raw:
            spec = raw["domain"]
            if isinstance(spec, str):
                spec = resolve_path(spec, base)
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
