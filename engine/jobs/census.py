"""The census job kind (a config with a ``geography`` section; issue 35), run by the one driver like every job.

Order of work: the config and the public map are checked (a map that is not a tree, a level that does not exist:
one line, nothing written) → the persons are opened (codes checked against the domain) → under the cluster,
one counting pass gives every level's tables per unit and the invariant totals → each level is measured
(ResidualPlanner per unit, one ledger charge per level) and the noisy residuals are committed to the checkpoint
(a resumed run re-reads them: nothing is spent twice) → the hierarchical fit, non-negativity, rounding and the
bootstrap intervals (post-processing: no charge) → written::

    answers/<NNNN>-<level>-<attrs>.parquet   one row per unit and cell: <level> (the unit's code), attribute
                                             codes (and labels), estimate, variance, published, ci_low, ci_high
    answers/index.json                       groups with "by", "attributes", file, rows, ci; levels; invariants
    ledger.json                              one charge per level; invariants listed as public facts
    config.yaml, report.json                 the resolved config; levels, post-processing diagnostics, timings
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.census.spec import TOTAL, CensusGroup, CensusSpec, parse_census
from privcube.core.errors import ConfigError, DataError
from privcube.jobs.kind import JobEnv

CHECKPOINT_DIR = "checkpoint"
#: the bootstrap's replicates run as this many tasks (each returns two moments per published cell, so the
#: driver holds at most this many of them at once; 2: one per worker of a 2-worker LocalCluster)
BOOTSTRAP_TASKS = 2
#: answer frames are written once this many rows are waiting (all 455 frames of a 10^8-person release held at
#: once took 2.2 GB)
WRITE_BATCH_ROWS = 2_000_000
PUBLIC_FACTS_NOTE = ("invariants are published exactly from the data: they are not protected by the budget and are "
                     "stated here as public facts")


class CensusCheckpoint:
    """The measured residuals of a census run (``<out>/checkpoint``), saved once every level is measured; the
    run folder appears with it."""

    def __init__(self, rundir: Any, identity: Mapping[str, Any]) -> None:
        from privcube.storage.checkpoint import RunCheckpoint

        self.rundir = rundir
        self.ck = RunCheckpoint(Path(rundir.path) / CHECKPOINT_DIR, identity=identity)

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint (CheckpointError if it is another run's), None if none."""
        return self.ck.check_identity()

    def exists(self) -> bool:
        """Whether the measurements were committed."""
        return self.ck.exists()

    def save(self, state: Mapping[str, Any]) -> None:
        """Create the run folder, then commit ``state`` ({"meta", "arrays"})."""
        self.rundir.create()
        self.ck.save(1, state)

    def load(self) -> dict[str, Any] | None:
        """The committed state, or None."""
        got = self.ck.load()
        return None if got is None else got[1]


class CensusJobKind:
    """Tables by geographic level, consistent across levels (``JobKind``); one object per run."""

    mechanism = "census"

    def __init__(self, spec: CensusSpec) -> None:
        self.spec = spec
        self.cluster: dict[str, Any] = {}
        self.noise_sampler = "continuous"
        self.hierarchy: Any = None
        self.plans: dict[str, Any] = {}
        self.derived: dict[str, Any] = {}

    @classmethod
    def load(cls, raw: Mapping[str, Any], base: Path, data: Any = None) -> CensusJobKind:
        """Validate a census config (reads no data; the map is read in ``check_before_data``)."""
        if data is not None:
            raise ConfigError("data=: a census job reads its persons from data.path; give the path in the config")
        return cls(parse_census(raw, base))

    def fingerprint(self) -> str:
        """Hash of the resolved config (what a resumed run must share with the original)."""
        text = json.dumps({k: v for k, v in self.resolved().items() if k != "cluster"}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def resolved(self) -> dict[str, Any]:
        """The config as written to ``config.yaml``: paths absolute."""
        from privcube.core.config_files import resolve_path

        out = json.loads(json.dumps(self.spec.raw, default=str))
        data = out.setdefault("data", {})
        data["path"] = self.spec.data_path
        if isinstance(data.get("domain"), str):
            data["domain"] = resolve_path(data["domain"], self.spec.base_dir)
        out["geography"]["map"] = self.spec.map_path
        return out

    def open_checkpoint(self, rundir: Any, identity: Mapping[str, Any]) -> CensusCheckpoint:
        """``<out>/checkpoint``, whose save creates the run folder."""
        return CensusCheckpoint(rundir, identity)

    def check_outputs(self, run_dir: Any) -> None:
        """The run folder apart from the persons, the domain and the map."""
        from privcube.storage.placement import check_placement, input_locations

        check_placement(run_dir, {}, [*input_locations(self.resolved()), self.spec.map_path])

    def check_before_data(self, *, replace: bool) -> None:
        """The public map read and checked (a tree with every level), the plan made (budget split)."""
        from privcube.census.measurement import level_plans
        from privcube.census.plan import read_hierarchy

        self.spec.noise_sampler = self.noise_sampler
        self.hierarchy = read_hierarchy(self.spec)
        self.plans = level_plans(self.spec, self.hierarchy)

    def read_inputs(self, env: JobEnv) -> Any:
        """The input's files and a reader of one file as codes (a column the data lacks is refused now; values
        are checked as each file is counted)."""
        return open_persons(self.spec, self.hierarchy)

    def start(self, inputs: Any, env: JobEnv) -> Any:
        """The table as opened."""
        return inputs

    def measure(self, source: Any, env: JobEnv) -> Any:
        """``(residuals, invariants, ledger)``: one counting pass, then every level measured and committed; a
        resumed run reads its committed measurements instead (nothing charged twice)."""
        from privcube.census.measurement import charge_levels, measure_level
        from privcube.privacy.ledger import PrivacyLedger

        spec, h = self.spec, self.hierarchy
        ledger = PrivacyLedger(spec.budget, noise=env.noise)
        units = {lv: h.n_units(lv) for lv in self.plans}
        saved = env.checkpoint.load() if env.resume and env.checkpoint.exists() else None
        if saved is not None:
            residuals, invariants = _unpack(saved["arrays"])
            charge_levels(ledger, self.plans, units)  # replayed: the same charges, recorded once
            return residuals, invariants, ledger
        t0 = time.perf_counter()
        counts = count_level_tables(spec, h, source, self.plans, env)
        env.timings["count_s"] = time.perf_counter() - t0
        _check_zeros(spec, counts)
        invariants = {lv: counts[(lv, ())] for lv in spec.invariants}
        charge_levels(ledger, self.plans, units)
        residuals = {}
        for lv, plan in self.plans.items():
            residuals[lv] = measure_level({t: counts[(lv, t)] for t in plan.sigma2}, plan, env.noise)
        del counts
        env.checkpoint.save({"meta": {"levels": list(self.plans)}, "arrays": _pack(residuals, invariants)})
        return residuals, invariants, ledger

    def release(self, measured: Any, env: JobEnv) -> None:
        """The published tables and their intervals (post-processing: nothing is charged)."""
        from privcube.census.intervals import bootstrap_intervals
        from privcube.census.release import release

        residuals, invariants, _ = measured
        spec, ctx = self.spec, env.context
        t0 = time.perf_counter()
        rel = release(spec, self.hierarchy, residuals, self.plans, invariants, progress=ctx.progress)
        env.timings["fit_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.derived["intervals"] = bootstrap_intervals(
            spec, self.hierarchy, rel, self.plans, invariants, spec.groups, replicates=spec.output["bootstrap"],
            level=spec.output["ci_level"], draw=env.noise.gaussian, map=ctx.map, scatter=ctx.scatter,
            tasks=BOOTSTRAP_TASKS)
        env.timings["intervals_s"] = time.perf_counter() - t0
        self.derived["release"] = rel

    def write(self, measured: Any, env: JobEnv) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """answers/, ledger.json, config.yaml, report.json; returns (ledger, report, result)."""
        from privcube.mechanisms.base import MechanismResult

        _, invariants, ledger = measured
        spec, rundir, rel = self.spec, env.rundir, self.derived["release"]
        t0 = time.perf_counter()
        ledger_dict = ledger.to_dict()
        ledger_dict["noise"] = env.noise.to_dict()
        ledger_dict["public_facts"] = {"invariants": [_inv_name(lv) for lv in spec.invariants],
                                       "note": PUBLIC_FACTS_NOTE}
        rundir.create()
        with rundir.writing("outputs"):
            rundir.write_json("ledger.json", ledger_dict)
            rundir.write_config(self.resolved())
            index = write_census_answers(rundir.path / "answers", spec, self.hierarchy, rel,
                                         self.derived["intervals"])
        env.timings["write_s"] = time.perf_counter() - t0
        env.timings["total_s"] = time.perf_counter() - env.t_start
        report = self._report(rel, env, index)
        with rundir.writing("outputs"):
            rundir.write_json("report.json", report)
        return ledger_dict, report, MechanismResult([], report=report)

    def _report(self, rel: Any, env: JobEnv, index: list[dict[str, Any]]) -> dict[str, Any]:
        """``report.json``: levels (units, share, ρ, expected RMSE), invariants, diagnostics, warnings."""
        from privcube.census.plan import plan_census

        spec = self.spec
        summary = plan_census(spec, self.hierarchy, self.plans)
        warnings = diagnostics_warnings(rel.diagnostics)
        return {"mechanism": "census", "measured_by": spec.mechanism, "timings": env.timings,
                "levels": summary.details["levels"], "split": summary.privacy["split"],
                "expected_error": summary.to_dict(), "groups": index,
                "invariants": {"published_exactly": [_inv_name(lv) for lv in spec.invariants],
                               "note": PUBLIC_FACTS_NOTE},
                "structural_zeros": summary.details["structural_zeros"], "integer": bool(spec.output["integer"]),
                "postprocess": {"charged": False, **rel.diagnostics},
                "intervals": {"method": "parametric bootstrap", "replicates": spec.output["bootstrap"],
                              "level": spec.output["ci_level"]},
                "noise": env.noise.to_dict(), **({"warnings": warnings} if warnings else {})}

    def publish(self, env: JobEnv) -> None:
        """Nothing: a census job publishes no copies."""

    def completed(self, env: JobEnv) -> None:
        """A finished run is never resumed: its checkpoint (noisy measurements only) is removed."""
        shutil.rmtree(env.rundir.path / CHECKPOINT_DIR, ignore_errors=True)


def open_persons(spec: CensusSpec, hierarchy: Any) -> tuple[list[str], Any, dict[str, np.ndarray]]:
    """``(files, reader, unit_of)``: the persons' files, a picklable reader of one file's codes (the finest unit
    as its position among the sorted map codes) and, per level, the tree's unit index of each such position."""
    from privcube.storage.census_counts import open_partitions

    finest, h = spec.attribute, hierarchy
    sorted_codes = np.sort(h.codes[finest])
    position = h.index_of(finest, sorted_codes)  # sorted-code position -> the tree's unit index
    unit_of = {lv: (position if lv == finest else h.ancestor(finest, position, lv)) for lv in spec.levels}
    schema = spec.schema if spec.schema is not None else spec.domain
    files, read = open_partitions(spec.data_path, schema, [finest, *spec.attributes], finest=finest,
                                  finest_codes=sorted_codes, fmt=spec.data_format)
    return files, read, unit_of


def count_level_tables(spec: CensusSpec, hierarchy: Any, persons: Any, plans: Mapping[str, Any], env: JobEnv
                       ) -> dict[tuple[str, tuple[str, ...]], np.ndarray]:
    """Every level's exact tables per unit (each residual its plan measures, and the invariant levels' totals),
    in one pass over the files through the run context (on the cluster's workers when there is one)."""
    from privcube.graphs.census_counts import count_tables
    from privcube.storage.census_counts import LevelTable

    wanted = [LevelTable(lv, t) for lv, p in plans.items() for t in p.sigma2]
    wanted += [LevelTable(spec.levels[0] if lv == TOTAL else lv, ()) for lv in spec.invariants]
    files, read, unit_of = persons
    counts = count_tables(env.context, files, read, unit_of, spec.attribute, list(dict.fromkeys(wanted)),
                          spec.sizes, {lv: hierarchy.n_units(lv) for lv in spec.levels},
                          title=None if env.quiet else "counting census tables")
    out = {(t.level, t.attributes): np.asarray(c) for t, c in counts.items()}
    if TOTAL in spec.invariants:
        out[(TOTAL, ())] = np.array([out[(spec.levels[0], ())].sum()])
    return out


def _check_zeros(spec: CensusSpec, counts: Mapping[tuple[str, tuple[str, ...]], np.ndarray]) -> None:
    """Rows in a cell declared impossible contradict ``structural_zeros``: one line (the rule, never a count of
    a small cell: only that it happens)."""
    for i, rule in enumerate(spec.zeros):
        for (lv, attrs), c in counts.items():
            mask = rule.mask(attrs, spec.sizes) if attrs else None
            if mask is not None and np.any(c[:, mask] > 0):
                raise DataError(f"structural_zeros[{i}]: the data has rows in cells declared impossible "
                                f"({', '.join(rule.codes)}); fix the rule or the data")


def _pack(residuals: Mapping[str, Mapping[tuple[str, ...], np.ndarray]], invariants: Mapping[str, np.ndarray]
          ) -> dict[str, np.ndarray]:
    """Flat checkpoint arrays: ``r|<level>|<attrs>`` and ``i|<level>``."""
    out = {f"r|{lv}|{','.join(t)}": np.asarray(z) for lv, zs in residuals.items() for t, z in zs.items()}
    out.update({f"i|{lv}": np.asarray(v) for lv, v in invariants.items()})
    return out


def _unpack(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, dict[tuple[str, ...], np.ndarray]],
                                                       dict[str, np.ndarray]]:
    """Inverse of :func:`_pack`."""
    residuals: dict[str, dict[tuple[str, ...], np.ndarray]] = {}
    invariants = {}
    for key, arr in arrays.items():
        kind, rest = key.split("|", 1)
        if kind == "i":
            invariants[rest] = np.asarray(arr)
        else:
            lv, attrs = rest.split("|")
            residuals.setdefault(lv, {})[tuple(a for a in attrs.split(",") if a)] = np.asarray(arr)
    return residuals, invariants


def _inv_name(level: str) -> str:
    return "total" if level == TOTAL else f"by {level}"


def diagnostics_warnings(diag: Mapping[str, Any]) -> list[str]:
    """One line per post-processing stage that stopped at its cap before its tolerance."""
    out = []
    for stage, d in diag.items():
        if isinstance(d, Mapping) and d.get("converged") is False:
            out.append(f"census {stage}: stopped at its iteration cap before its tolerance (largest margin "
                       f"deviation {d.get('max_residual')}); the published sums are still exact")
    return out


def write_census_answers(folder: Path, spec: CensusSpec, hierarchy: Any, rel: Any,
                         intervals: Mapping[CensusGroup, tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
    """One Parquet file per table family (rows: unit x cell) and ``index.json``; each written atomically, the
    frames in batches of ``WRITE_BATCH_ROWS`` rows as they are built (bounded memory), with a progress line."""
    from privcube.core.progress import progress
    from privcube.storage.outputs import atomic_write_json, write_parquet_files

    folder.mkdir(exist_ok=True, mode=0o700)
    index: list[dict[str, Any]] = []
    frames: list[tuple[Path, pd.DataFrame]] = []
    with progress("writing the answer tables", len(spec.groups), heartbeat=1.0) as update:
        for i, g in enumerate(spec.groups):
            frame = census_frame(spec, hierarchy, rel, g, intervals[g])
            name = f"{i:04d}-{g.label()}.parquet"
            frames.append((folder / name, frame))
            index.append({"by": g.level, "attributes": list(g.attributes), "file": name, "rows": int(len(frame)),
                          "units": int(hierarchy.n_units(g.level)), "integer": bool(spec.output["integer"]),
                          "ci": {"level": spec.output["ci_level"], "method": "bootstrap"}})
            if sum(len(f) for _, f in frames) >= WRITE_BATCH_ROWS:
                write_parquet_files(frames)
                frames = []
            update(1)
        write_parquet_files(frames)
    atomic_write_json(folder / "index.json", {"groups": index, "levels": list(spec.levels),
                                              "invariants": [_inv_name(lv) for lv in spec.invariants]})
    return index


def census_frame(spec: CensusSpec, hierarchy: Any, rel: Any, g: CensusGroup,
                 interval: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """One table family as rows ``(unit, cell)``: the level's unit code, attribute codes (and labels), estimate,
    variance, published, ci_low, ci_high."""
    lv, attrs = g.level, g.attributes
    est = np.asarray(rel.linear[lv][attrs], dtype=float)
    n = est.shape[0]
    cells = int(np.prod(est.shape[1:], dtype=int))
    cols: dict[str, Any] = {lv: np.repeat(np.asarray(hierarchy.codes[lv], dtype=np.int64), cells)}
    grids = np.indices(est.shape[1:]).reshape(len(attrs), -1) if attrs else np.zeros((0, 1), dtype=int)
    for a, codes in zip(attrs, grids):
        cols[a] = np.tile(codes.astype(np.int64), n)
    var = np.broadcast_to(np.asarray(rel.variance[lv][attrs], dtype=float).reshape(n, -1), (n, cells))
    pub = np.asarray(rel.published[lv][attrs])
    cols["estimate"] = est.reshape(-1)
    cols["variance"] = var.reshape(-1)
    cols["published"] = pub.reshape(-1).astype(np.int64 if spec.output["integer"] else float)
    cols["ci_low"], cols["ci_high"] = (np.asarray(x, dtype=float).reshape(-1) for x in interval)
    frame = pd.DataFrame(cols)
    if spec.output["labels"] and spec.schema is not None and hasattr(spec.schema, "labels"):
        for a in attrs:
            frame[f"{a}_label"] = np.asarray(spec.schema.labels(a), dtype=object)[frame[a].to_numpy()]
    return frame


__all__ = ["CensusJobKind", "census_frame", "count_level_tables", "write_census_answers"]
