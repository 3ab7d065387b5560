"""The single-table job: a mechanism answers a workload over one table (config: :mod:`privcube.config`).

Inputs are opened lazily (columns checked against the schema eagerly) and read only through a marginal
oracle; under a privacy unit the table is truncated to ``max_rows`` rows per person. The run folder
appears once the cluster is up, before the first checkpoint (``store.zarr/checkpoint``). Outputs: the
ledger (first: what was spent is a fact once measured), published answers and synthetic records while
the cluster is up, then ``config.yaml``, ``answers/``, ``synthetic/``, ``store.zarr`` and ``report.json``;
the config's ``output.answers`` / ``output.zarr`` copies just before the run is marked complete.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privcube.config import JobConfig, load_config
from privcube.core.errors import ConfigError, PrivcubeError
from privcube.jobs.kind import JobEnv
from privcube.mechanisms import get_mechanism
from privcube.mechanisms.base import PlanSummary


def build_mechanism(cfg: JobConfig) -> Any:
    """The configured mechanism, with its parameters checked and the run's noise sampler declared."""
    mech = get_mechanism(cfg.mechanism)(cfg.mechanism_params)
    mech.use_noise_sampler(cfg.noise_sampler)
    return mech


def add_plan_intervals(summary: PlanSummary, noise: Sequence[Mapping[str, Any]], level: float) -> None:
    """Each plan group gets ``ci_half_width`` (the typical half-width of its answers' intervals at
    ``level``: at the group's RMS noise, or the mean exact width of Laplace combinations), ``ci_level`` and
    ``ci_method`` (``exact`` or a conservative ``bound``); data-independent, like the rest of the plan."""
    from privcube.mechanisms.base import GroupAnswer
    from privcube.privacy.intervals import half_widths

    for g, fields in zip(summary.groups, noise):
        rmse = g.get("rmse")
        if not isinstance(rmse, (int, float)):
            continue
        coefs = fields.get("noise_coefficients")
        n = 1 if coefs is None else int(np.asarray(coefs).shape[0])
        probe = GroupAnswer(None, np.zeros(n), np.full(n, float(rmse) ** 2), **dict(fields))  # type: ignore[arg-type]
        half, method = half_widths(probe, level)
        if half is not None:
            g.update(ci_level=level, ci_half_width=float(np.mean(half)), ci_method=method)


def plan_of(cfg: JobConfig, mech: Any) -> PlanSummary:
    """The mechanism's data-independent plan for ``cfg`` with its answers' interval widths."""
    summary = mech.plan(cfg.workload, cfg.mechanism_budget)
    add_plan_intervals(summary, mech.plan_noise(cfg.workload, cfg.mechanism_budget), cfg.output.get("ci_level", 0.95))
    return summary


def config_warnings(cfg: JobConfig, rmse: Any = None) -> list[str]:
    """The config's one-line warnings, data-independent (``plan`` prints them, a run's ``report.json`` keeps
    them): a schema inferred from the data, a large delta, a large ``privacy_unit.max_rows`` (``rmse``: the
    plan's expected RMSE, stated in that warning)."""
    from privcube.privacy.unit import unit_warning
    from privcube.storage.schema import inferred_warnings

    return inferred_warnings({"table": cfg.schema}, "the input table (data.schema)") + list(cfg.warnings) \
        + unit_warning(cfg.privacy_unit, rmse)


def with_data(raw: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """The config mapping with ``data`` (frame, path or paths) standing in for ``data.path``."""
    if data is None:
        return dict(raw)
    section = raw.get("data")
    section = {k: v for k, v in section.items() if k != "path"} if isinstance(section, Mapping) else {}
    return {**raw, "data": {**section, "path": data}}


def config_with_data(cfg: JobConfig, data: Any) -> JobConfig:
    """A validated JobConfig whose data location is replaced by ``data``."""
    from privcube.storage.data_spec import data_paths
    from privcube.storage.formats.frame import is_frame

    if is_frame(data):
        return dataclasses.replace(cfg, data_path=None, data_frame=data)
    return dataclasses.replace(cfg, data_path=data_paths(data, Path(".").resolve()), data_frame=None)


def config_fingerprint(cfg: JobConfig) -> str:
    """Hash of what a resumed run must share with the original: data, domain, workload, privacy, mechanism."""
    raw = cfg.raw if isinstance(cfg.raw, Mapping) else {}
    key = {
        "data": str(cfg.data_path) if cfg.data_frame is None else "<DataFrame>", "compress": cfg.compress,
        "noise_sampler": cfg.noise_sampler,
        "domain": cfg.domain.to_dict(), "budget": cfg.budget.to_dict(),
        "mechanism": cfg.mechanism, "params": cfg.mechanism_params, "workload": raw.get("workload"),
    }
    if cfg.privacy_unit is not None:
        key["privacy_unit"] = [cfg.privacy_unit.id, cfg.privacy_unit.max_rows]
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_input(cfg: JobConfig) -> Any:
    """The run's EncodedTable: the DataFrame given in Python, else the files at ``data.path`` (with the
    person id column too under a privacy unit; truncated once the run's noise key exists)."""
    if cfg.privacy_unit is not None:
        from privcube.storage.contribution import open_with_id

        return open_with_id(cfg.data_path, cfg.schema, cfg.privacy_unit.id, frame=cfg.data_frame, fmt=cfg.data_format)
    if cfg.data_frame is not None:
        from privcube.storage.frames import open_frame

        return open_frame(cfg.data_frame, cfg.schema)
    from privcube.storage.ingest import open_table

    return open_table(cfg.data_path, cfg.schema, fmt=cfg.data_format)


def bounded(table: Any, cfg: JobConfig, noise: Any) -> Any:
    """Under a privacy unit, the table truncated to ``max_rows`` rows per person (keyed by the run's noise
    source, so a seeded run repeats it); otherwise the table itself."""
    if cfg.privacy_unit is None:
        return table
    from privcube.storage.contribution import hash_key_from, truncate_per_id

    return truncate_per_id(table, cfg.privacy_unit.max_rows, hash_key_from(noise))


class SingleTableJob:
    """A mechanism over one table's marginal oracle (``JobKind``); one object per run."""

    def __init__(self, cfg: JobConfig) -> None:
        """The job of a validated config (which must locate its data)."""
        if cfg.data_path is None and cfg.data_frame is None:
            raise ConfigError("data.path is missing: a run needs the data's location")
        self.cfg = cfg
        self.mechanism = cfg.mechanism
        self.cluster = cfg.cluster
        self.noise_sampler = cfg.noise_sampler
        self.mech: Any = None
        self.table: Any = None
        self.ledger: dict[str, Any] = {}
        self.derived: dict[str, Any] = {}

    @classmethod
    def load(cls, raw: Mapping[str, Any], base: Path, data: Any = None) -> SingleTableJob:
        """The job of a raw config (relative paths against ``base``), ``data`` standing in for ``data.path``."""
        return cls(load_config(with_data(raw, data), base_dir=base))

    @classmethod
    def from_config(cls, cfg: JobConfig, data: Any = None) -> SingleTableJob:
        """The job of a JobConfig, ``data`` standing in for its data location."""
        return cls(cfg if data is None else config_with_data(cfg, data))

    def fingerprint(self) -> str:
        """See :func:`config_fingerprint`."""
        return config_fingerprint(self.cfg)

    def open_checkpoint(self, rundir: Any, identity: Mapping[str, Any]) -> Any:
        """``store.zarr/checkpoint`` of the run folder."""
        from privcube.storage.checkpoint import RunCheckpoint

        return RunCheckpoint(rundir.store_path, identity=identity)

    def check_outputs(self, run_dir: Any) -> None:
        """The run folder and ``output.answers`` / ``output.zarr`` apart from each other and from the data and
        schema files (see ``storage.placement.check_placement``)."""
        from privcube.storage.placement import check_placement, input_locations

        check_placement(run_dir, self.cfg.output, input_locations(self.cfg.resolved()))

    def check_before_data(self, *, replace: bool) -> None:
        """``output.answers`` / ``output.zarr`` destinations free (unless ``replace``); mechanism options valid."""
        from privcube.storage.outputs import check_publish_targets

        check_publish_targets(self.cfg.output, replace=replace)
        self.mech = build_mechanism(self.cfg)

    def read_inputs(self, env: JobEnv) -> Any:
        """The table, opened lazily (columns checked against the schema now)."""
        self.table = open_input(self.cfg)
        return self.table

    def start(self, inputs: Any, env: JobEnv) -> Any:
        """The marginal oracle on the cluster (the table truncated per person, compressed if asked); the
        run folder is created now."""
        from privcube.graphs.marginals import DataOracle

        frame, weight = bounded(inputs, self.cfg, env.noise).frame, None
        if self.cfg.compress:
            from privcube.storage.distinct import compress

            frame, weight = compress(frame), "count"
        oracle = DataOracle(frame, self.cfg.domain, weight=weight, client=env.client)
        env.rundir.create()
        return oracle

    def measure(self, source: Any, env: JobEnv) -> Any:
        """``(result, ledger)`` of one run of the mechanism (the ledger per row; see privcube.privacy.unit)."""
        from privcube.privacy.ledger import PrivacyLedger

        cfg = self.cfg
        ledger = PrivacyLedger(cfg.mechanism_budget)
        result = self.mech.run(source, cfg.workload, cfg.mechanism_budget, ledger, env.noise, env.context)
        return result, ledger

    def release(self, measured: Any, env: JobEnv) -> None:
        """``ledger.json`` (per person under a privacy unit), then published answers and synthetic records."""
        from privcube.jobs.derived import postprocess, write_records

        result, ledger = measured
        cfg, rundir = self.cfg, env.rundir
        if cfg.privacy_unit is not None:  # the guarantee is per person: every charge rescaled (ρ K², ε K)
            ledger = cfg.privacy_unit.person_ledger(ledger, cfg.budget)
        self.ledger = ledger.to_dict()
        self.ledger["noise"] = env.noise.to_dict()
        if cfg.privacy_unit is not None:
            self.ledger["privacy_unit"] = cfg.privacy_unit.to_dict()
        with rundir.writing("ledger"):
            rundir.write_json("ledger.json", self.ledger)  # first: what was spent is a fact once measured
        t1 = time.perf_counter()
        post = postprocess(cfg, self.mech, result, env.context)  # `published`: non-negative, consistent; no charge
        env.timings["postprocess_s"] = time.perf_counter() - t1
        if post is not None:
            self.derived["postprocess"] = post
        if cfg.synthesize:  # post-processing of the answers, while the cluster is up (chunks run there)
            t1 = time.perf_counter()
            with rundir.writing("synthetic records"):
                self.derived["synthetic_records"] = write_records(cfg, result, rundir, env.noise, env.context,
                                                                  keep_existing=env.resume)
            env.timings["synthesize_s"] = time.perf_counter() - t1

    def write(self, measured: Any, env: JobEnv) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """``config.yaml``, ``answers/``, ``synthetic/``, ``store.zarr``, then ``report.json``; returns (ledger,
        report, result)."""
        from concurrent.futures import ThreadPoolExecutor, wait

        from privcube.storage.answer_store import write_tensors

        result, _ = measured
        cfg, rundir = self.cfg, env.rundir
        t0 = time.perf_counter()
        try:
            expected = plan_of(cfg, self.mech).to_dict()
        except PrivcubeError:
            expected = None
        with rundir.writing("outputs"), ThreadPoolExecutor(1) as pool:
            # store.zarr on a second thread while answers/ is written: both are bound by file-system round
            # trips in different folders; the first failure is raised once both have ended
            tensors = pool.submit(write_tensors, rundir.store_path, cfg.domain, result, keep_existing=env.resume)
            try:
                rundir.write_config(cfg.resolved())
                rundir.write_answers(result.answers, cfg.domain, cfg.schema, labels=cfg.output.get("labels", True),
                                     keep_existing=env.resume, ci_level=cfg.output.get("ci_level", 0.95))
                if result.synthetic:
                    rundir.write_synthetic(result.synthetic)
            finally:
                wait([tensors])
            tensors.result()
        env.timings["write_s"] = time.perf_counter() - t0
        env.timings["total_s"] = time.perf_counter() - env.t_start
        report = self._report(result, env, expected)
        with rundir.writing("outputs"):
            rundir.write_json("report.json", report)
        return self.ledger, report, result

    def _report(self, result: Any, env: JobEnv, expected: Any) -> dict[str, Any]:
        """``report.json``: timings, sizes, the plan's expected error, noise, the mechanism's report, and
        ``warnings`` (e.g. a schema inferred from the data) when there are any."""
        cfg = self.cfg
        warns = config_warnings(cfg, (expected or {}).get("rmse"))
        post = self.derived.get("postprocess") or {}
        if post.get("converged") is False:  # said where a user reads it: the terminal and the page, not only here
            warns.append(f"post-processing ({post.get('method')}) stopped at its iteration cap "
                         f"({post.get('iterations')}) before its tolerance was met: the published answers are "
                         "non-negative and consistent, but not at the fitted optimum; raise "
                         "postprocess.max_iterations")
        return {
            "mechanism": cfg.mechanism,
            "timings": env.timings,
            "sizes": {
                "attributes": len(cfg.domain),
                "domain_cells": float(cfg.domain.size()),
                "groups": len(cfg.workload),
                "answers": int(sum(np.asarray(a.estimate).size for a in result.answers)),
                "partitions": int(self.table.npartitions),
            },
            "expected_error": expected,
            "noise": env.noise.to_dict(),
            **({"privacy_unit": cfg.privacy_unit.to_dict()} if cfg.privacy_unit is not None else {}),
            "mechanism_report": result.report,
            **self.derived,
            **({"warnings": warns} if warns else {}),
        }

    def publish(self, env: JobEnv) -> None:
        """Copies of ``answers/`` / ``store.zarr`` to ``output.answers`` / ``output.zarr``."""
        from privcube.storage.outputs import publish_outputs

        publish_outputs(env.rundir.path, self.cfg.output)

    def completed(self, env: JobEnv) -> None:
        """Nothing: the checkpoint stays in ``store.zarr``."""


__all__ = ["SingleTableJob", "add_plan_intervals", "build_mechanism", "config_fingerprint", "config_warnings",
           "plan_of"]
