"""Job configuration: load YAML/JSON, validate every key, resolve paths, domain, workload, budget.

The driver reads the config; each section is checked by the layer it belongs to: ``data`` by storage
(:mod:`privcube.storage.data_spec`, formats in :mod:`privcube.storage.formats`), the mechanism's parameters
and budget by the mechanism class, ``synthesize`` by :mod:`privcube.synth.spec`, ``postprocess`` by
:mod:`privcube.postprocess.spec`, ``privacy_unit`` by :mod:`privcube.privacy.unit` and ``cluster`` by its
cluster kind (:mod:`privcube.graphs.cluster.registry`); no layer below imports this module.

Top-level keys: ``data`` (``path``; ``format``, default: guessed from the file names; ``schema`` for raw
data or ``domain`` as a path to a ``{column: size}`` JSON or an inline mapping), ``domain`` (inline, for
planning without data),
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
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcube.core.domain import Domain
from privcube.core.config_files import RESOLVED_KEY, check_recorded, resolve_path
from privcube.core.errors import ConfigError
from privcube.core.params import REQUIRED, Param
from privcube.core.workload import Workload, parse_workload
from privcube.core.yaml_io import read_config_file
from privcube.privacy.budget import PrivacyBudget
from privcube.storage.formats.frame import FRAME_PLACEHOLDER

#: the top-level keys of a single-table job config (each section is checked by the layer named in its help)
TOP_PARAMS: dict[str, Param] = {
    "data": Param(None, "mapping", "where the rows are, their format and their schema or domain (the data section)"),
    "domain": Param(None, "{column: size}", "an inline domain, for planning without data"),
    "mechanism": Param(REQUIRED, "name | {name, parameters}", "the mechanism and its parameters (Mechanisms)"),
    "workload": Param(REQUIRED, "list of query groups", "the queries answered: {kway: k} (all k-way marginals) or "
                                                        "{attributes, queries, weight} entries"),
    "privacy": Param(REQUIRED, "{epsilon, delta} | {rho, delta} | {epsilon}",
                     "the run's budget ({epsilon} alone: pure DP); budget_file charges a dataset's budget file"),
    "privacy_unit": Param(None, "{id, max_rows}", "protect people with several rows (the privacy_unit section)"),
    "output": Param(None, "mapping", "answer labels, the interval level and published copies (the output section)"),
    "cluster": Param(None, "name | mapping", "where the work runs (Cluster kinds; without it: in this process)"),
    "noise_sampler": Param("continuous", "continuous | discrete", "discrete: exact discrete Gaussian/Laplace "
                                                                 "samplers (integer-valued releases only)"),
    "synthesize": Param(None, "true | int | mapping", "synthetic records from the published marginals, no budget "
                                                      "(the synthesize section)"),
    "postprocess": Param(None, "mapping | none", "non-negative, consistent published marginals, no budget; on by "
                                                 "default, none turns it off (the postprocess section)"),
}
TOP_KEYS = set(TOP_PARAMS)
#: the keys of the ``output`` section
OUTPUT_PARAMS: dict[str, Param] = {
    "labels": Param(True, "bool", "write each attribute's decoded <attr>_label column beside its codes"),
    "ci_level": Param(0.95, "number in (0, 1)", "level of every answer's ci_low / ci_high interval"),
    "answers": Param(None, "path | URL", "a copy of the run's answers/ published here once the run is complete"),
    "zarr": Param(None, "path | URL", "a copy of the run's store.zarr published here once the run is complete"),
}
OUTPUT_KEYS = set(OUTPUT_PARAMS)


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
    data_format: str | None = None  # data.format: the input format's name (None: guessed from the file names)
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


def load_config(source: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None,
                need_data: bool = True) -> JobConfig:
    """Load and validate a job config from a file or a mapping. A run folder's ``config.yaml`` is accepted as
    it is: its ``resolved`` record is checked against the config resolved now, not read as input."""
    from privcube.storage.data_spec import split_frame

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
    """The body of :func:`load_config` once the top-level keys are known: each section is checked by the layer
    it belongs to (the mechanism its parameters and budget, storage ``data``, the synthesizer ``synthesize``,
    post-processing ``postprocess``, the cluster kind ``cluster``), in the order the sections are listed."""
    from privcube.postprocess.spec import PostprocessSpec, parse_postprocess
    from privcube.privacy.budget import budget_warnings
    from privcube.privacy.unit import parse_privacy_unit
    from privcube.storage.data_spec import check_compress, parse_data

    mech, params = _mechanism_section(raw)
    data = parse_data(raw, base, need_data=need_data, frame=frame)
    if "workload" not in raw:
        raise ConfigError("workload is missing")
    if isinstance(raw["workload"], Workload):  # built in Python (all_kway, hybrid, ...): kept as its config
        raw["workload"] = raw["workload"].to_config()
    workload = parse_workload(raw["workload"], data.domain)
    if "privacy" not in raw:
        raise ConfigError("privacy is missing (epsilon, epsilon + delta, or rho)")
    budget = PrivacyBudget.from_config(raw["privacy"])
    mech.check_budget(params, raw["privacy"], budget)
    cluster = parse_cluster(raw, base)
    output = parse_output(raw.get("output"), base)
    compress = check_compress(raw)
    noise_sampler = parse_noise_sampler(raw)
    synthesize = _synthesize_section(raw.get("synthesize"), workload)
    unit = parse_privacy_unit(raw.get("privacy_unit"), mech.name, params)
    postprocess = parse_postprocess(raw["postprocess"]) if "postprocess" in raw else PostprocessSpec()
    params = mech.configured_params(params, postprocess)
    mech.check_params(params)
    return JobConfig(raw=raw, base_dir=base, domain=data.domain, schema=data.schema, data_path=data.path,
                     mechanism=mech.name, mechanism_params=params, workload=workload, budget=budget,
                     cluster=dict(cluster), output=output, compress=compress,
                     noise_sampler=noise_sampler, synthesize=synthesize, data_frame=frame,
                     privacy_unit=unit, postprocess=postprocess, warnings=budget_warnings(budget),
                     data_format=data.format)


def _mechanism_section(raw: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(mechanism class, its parameters)`` of the ``mechanism`` section (a bare name or ``{name, ...}``)."""
    from privcube.mechanisms import REGISTRY, get_mechanism

    mech = raw.get("mechanism")
    if isinstance(mech, str):
        mech = {"name": mech}
    if not isinstance(mech, Mapping) or "name" not in mech:
        raise ConfigError("mechanism: expected a mapping with a 'name' (e.g. {name: residual-planner})")
    name = mech["name"]
    if name == "relational":
        raise ConfigError("mechanism 'relational' runs two tables and their links: it has no single-table "
                          "plan; use `privcube run` (see privcube.relational.job)")
    if name not in REGISTRY:
        raise ConfigError(f"mechanism: unknown name {name!r}; known: {', '.join(REGISTRY)}")
    return get_mechanism(name), {k: v for k, v in mech.items() if k != "name"}


def parse_output(output: Any, base: Path) -> dict[str, Any]:
    """The ``output`` section: ``labels``, ``ci_level`` (checked), ``answers``/``zarr`` (paths resolved)."""
    output = output or {}
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
    return output


def _synthesize_section(spec: Any, workload: Workload) -> dict[str, Any] | None:
    """``synthesize``, checked by the synthesizer (:mod:`privcube.synth.spec`); nothing is loaded without it."""
    if spec is None or spec is False:
        return None
    from privcube.synth.spec import parse_synthesize

    return parse_synthesize(spec, workload)


def parse_cluster(raw: Mapping[str, Any], base: Path | None = None) -> dict[str, Any]:
    """The ``cluster`` section as a mapping (a bare name means ``{type: name}``), checked by its cluster kind.

    With ``base`` (the config file's folder), paths read on this machine are resolved against it like
    every other relative path of the config (see
    :func:`privcube.graphs.cluster.registry.parse_cluster_section`).
    """
    from privcube.graphs.cluster.registry import parse_cluster_section

    return parse_cluster_section(raw.get("cluster"), base)


def parse_noise_sampler(raw: Mapping[str, Any]) -> str:
    """``noise_sampler``: ``continuous`` (default) or ``discrete`` (exact discrete Gaussian/Laplace)."""
    noise_sampler = raw.get("noise_sampler", "continuous")
    if noise_sampler not in ("continuous", "discrete"):
        raise ConfigError(f"noise_sampler must be 'continuous' or 'discrete', got {noise_sampler!r}")
    return noise_sampler
