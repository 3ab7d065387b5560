"""The relational job kind (``mechanism: {name: relational}``): two tables (or one self-linked table, or a
schema graph) and their links synthesized; run by the one driver (``privcube.api.run_job``) like every job.

Order of work (bad input leaves nothing behind): validate the config and budgets (no data read) → check
the output folder (and, with ``--resume``, the checkpoint's identity) → read each table (schema columns
encoded to codes; key / foreign-key columns kept aside as identifiers, never encoded) and the link
table → ``run_relational`` under one ledger of the composed budget, which checks links, degrees and
sizes before its first charge; the run directory appears with the first checkpoint
(``checkpoint/``, committed after each synthetic table and each link iteration through
``storage.checkpoint``, removed once the run is complete) → write::

    synthetic/<table>.parquet   key column (synthetic ids 0..n-1), the FK column for one-to-many children,
                                attribute codes, decoded ``<attr>_label`` columns where the schema has labels
    synthetic/links.parquet     the links as (<left>.<key>, <right>.<key>) pairs: many-to-many, and one-to-many
                                as (<child>.<key>, <parent>.<key>), the same links as the child's FK column;
                                self-referential links: (source, target) under the link file's two column names
    synthetic/links/<name>.parquet
                                schema graphs: one file per link, named as under ``privacy.links``: per foreign
                                key ``<child>.<fk>`` (<child>.<key>, <parent>.<key>) pairs; per link table
                                ``<left>.<key>-<right>.<key>`` (<left>.<key>, <right>.<key>) pairs
    ledger.json                 budget/spent/charges of the composed run (convention in ``composition``)
    config.yaml, report.json    resolved config; report (``relational.report_json``): ``warnings``,
                                ``dp_error_measured_workloads`` (DP), ``nonprivate_evaluation`` (NON-PRIVATE,
                                only with ``evaluate_nonprivate: true``)
    .complete                   last

Each file is written atomically (a temporary name, then renamed) and the run counts only once
``.complete`` exists: a failure leaves no partial file and no finished run.

Composition convention: the ledger's budget is (Σε_i, Σδ_i) over the tables and the links (basic
composition of (ε_i, δ_i)-DP parts; each part spends ρ_i = cdp_rho(ε_i, δ_i)), ρ = Σρ_i; ``spent``
reads each part's spent ρ at its own δ and adds, so a full run shows ε1+ε2+ε_rel and δ1+δ2+δ_rel; the
tighter zCDP reading (cdp_epsilon(Σρ, Σδ)) is recorded under ``composition.zcdp``. A self-referential
job has one table part: it shows ε_table + ε_rel (the table is synthesized once).

Schema graphs (``data.links`` a list of foreign keys and link tables; ``privcube.relational.graph_run``):
every table is synthesized once, then each link on the synthetic tables with its own budget
(``privacy.links[<name>]``, ledger labels ``link:<name>:…``, part ``<name>`` of the composition; a foreign
key's name is its ``from``, a link table's ``<left>-<right>``); ``report.json`` lists the links.

Resume: ``--resume`` continues from ``checkpoint/`` (same config and seed, checked before any data is
read): finished tables are reused, the ledger is replayed from the checkpoint (no budget spent twice),
the link loop restarts after the last committed iteration, output files already written are kept.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from privcube.core.errors import ConfigError
from privcube.relational.config import COMPOSITION_NOTE, RelationalJob, TableSpec, load_relational_config

if TYPE_CHECKING:  # the driver's types (privcube.jobs is above this package): annotations only
    from privcube.jobs.kind import JobEnv
    from privcube.mechanisms.base import MechanismResult

CHECKPOINT_DIR = "checkpoint"


class LazyCheckpoint:
    """The relational run's checkpoint (``<out>/checkpoint``, a ``RelationalCheckpoint``) as ``run_relational``
    calls it: ``check_identity``, ``exists``, ``load``, ``save``.

    The run directory is created on the first save only, i.e. after every input check has passed and
    the first table has been synthesized: bad input still leaves nothing behind.
    """

    def __init__(self, rundir: Any, identity: Mapping[str, Any]) -> None:
        """Checkpoints of ``rundir`` that must match ``identity`` (mechanism, seed, config fingerprint)."""
        from privcube.relational.stages.checkpoint import RelationalCheckpoint

        self.rundir = rundir
        self.ck = RelationalCheckpoint(Path(rundir.path) / CHECKPOINT_DIR, identity)

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint (CheckpointError if it belongs to another run), None if none."""
        return self.ck.check_identity()

    def exists(self) -> bool:
        """Whether a committed checkpoint exists."""
        return self.ck.exists()

    def load(self) -> Any:
        """(round, {"meta", "arrays"}) of the committed checkpoint, or None."""
        return self.ck.load()

    def save(self, round: int, state: Mapping[str, Any]) -> None:
        """Create the run directory if needed, then commit ``state`` as checkpoint ``round``."""
        self.rundir.create()
        self.ck.save(round, state)


def labelled(frame: pd.DataFrame, t: TableSpec, labels: bool) -> pd.DataFrame:
    """The synthetic table with decoded ``<attr>_label`` columns when the schema has labels."""
    from privcube.synth.sampler import add_labels

    if not labels or not t.has_labels:
        return frame
    return add_labels(frame, t.schema)


def composed_ledger(ledger: Any, job: RelationalJob, noise: Any) -> dict[str, Any]:
    """ledger.json: budget (Σε, Σδ, Σρ), spent read per part and added, charges, the zCDP reading."""
    from privcube.privacy.zcdp import cdp_epsilon

    d = ledger.to_dict()
    d["noise"] = noise.to_dict()
    spent_rho = {n: 0.0 for n in job.parts}
    for c in d["charges"]:
        lab = c["label"]
        part = ("links" if lab.startswith("links:") else lab.split(":")[1] if lab.startswith(("table:", "link:"))
                else None)
        if part not in spent_rho:
            raise ConfigError(f"internal: charge {lab!r} belongs to no budget part")
        spent_rho[part] += float(c["rho"])
    parts = {}
    eps_spent, delta_spent = 0.0, 0.0
    for n, b in job.parts.items():
        r = min(spent_rho[n], b.rho)
        e = b.epsilon if r >= b.rho * (1 - 1e-9) else cdp_epsilon(r, b.delta) if r > 0 else 0.0
        dl = b.delta if r > 0 else 0.0
        parts[n] = {"budget": {"rho": b.rho, "epsilon": b.epsilon, "delta": b.delta},
                    "spent": {"rho": spent_rho[n], "epsilon": e, "delta": dl}}
        eps_spent += e
        delta_spent += dl
    total_rho = sum(spent_rho.values())
    d["budget"] = {"rho": job.total.rho, "epsilon": job.total.epsilon, "delta": job.total.delta}
    d["spent"] = {"rho": total_rho, "epsilon": eps_spent, "delta": delta_spent}
    d["composition"] = {
        "convention": COMPOSITION_NOTE,
        "parts": parts,
        "zcdp": {"rho": total_rho, "delta": job.total.delta,
                 "epsilon": cdp_epsilon(total_rho, job.total.delta) if total_rho > 0 else 0.0},
    }
    return d


def fingerprint(job: RelationalJob) -> str:
    """Hash of what a resumed run must share with the original (data paths, schemas, links, budgets, params)."""
    resolved = {k: v for k, v in job.resolved().items() if k != "cluster"}
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]


class RelationalJobKind:
    """Two linked tables synthesized (``JobKind``); one object per run. ``cluster`` and ``noise_sampler`` are
    the sections every job kind shares: the driver parses them and sets them here (``privcube.jobs.load_job``)."""

    mechanism = "relational"

    def __init__(self, job: RelationalJob, cluster: Mapping[str, Any] | None = None,
                 noise_sampler: str = "continuous") -> None:
        """The run of a validated relational job config on ``cluster`` (the parsed section; empty: none given)."""
        self.job = job
        self.cluster = dict(cluster or {})
        self.noise_sampler = noise_sampler

    @classmethod
    def load(cls, raw: Mapping[str, Any], base: Path, data: Any = None) -> RelationalJobKind:
        """Validate a relational config's own sections (reads schemas, never data); ``data=`` and
        ``privacy_unit`` are refused."""
        if "privacy_unit" in raw:
            raise ConfigError("privacy_unit is not supported by mechanism 'relational' (its neighbours change "
                              "one row and its links); remove privacy_unit or use a single-table mechanism")
        if data is not None:
            raise ConfigError("data=: a relational job reads its tables from data.tables; give their "
                              "paths in the config")
        return cls(load_relational_config(raw, base))

    def fingerprint(self) -> str:
        """See :func:`fingerprint`."""
        return fingerprint(self.job)

    def open_checkpoint(self, rundir: Any, identity: Mapping[str, Any]) -> LazyCheckpoint:
        """``<out>/checkpoint``, whose first save creates the run folder."""
        return LazyCheckpoint(rundir, identity)

    def check_outputs(self, run_dir: Any) -> None:
        """The run folder apart from the tables, schemas and link files (``storage.placement.check_placement``)."""
        from privcube.storage.placement import check_placement, input_locations

        check_placement(run_dir, {}, input_locations(self.job.resolved()))

    def check_before_data(self, *, replace: bool) -> None:
        """Nothing more to check: the config was validated whole when loaded."""

    def read_inputs(self, env: JobEnv) -> Any:
        """``(tables, links)`` as ``run_relational`` takes them (see ``relational.inputs``)."""
        from privcube.relational.inputs import read_graph_inputs, read_inputs

        t0 = time.perf_counter()
        inputs = read_graph_inputs(self.job) if self.job.multi else read_inputs(self.job)
        env.timings["read_s"] = time.perf_counter() - t0
        return inputs

    def start(self, inputs: Any, env: JobEnv) -> Any:
        """The inputs as read (the run folder appears with the first checkpoint)."""
        return inputs

    def measure(self, source: Any, env: JobEnv) -> Any:
        """``(RelationalResult, ledger)``: bad links / degrees / budgets raise before the first charge."""
        from privcube.privacy.ledger import PrivacyLedger
        from privcube.relational.stages.run import run_relational

        job, ctx = self.job, env.context
        ledger = PrivacyLedger(job.total, noise=env.noise)
        if job.multi:  # a schema graph: see graph_run
            from privcube.relational.graph_run import run_graph

            return run_graph(job, source, ledger, env.noise, ctx), ledger
        tables, links = source
        res = run_relational(tables, links, job.link_params("links"), job.budgets, ledger, env.noise,
                             progress=ctx.progress, checkpoint=ctx.checkpoint, resume=ctx.resume, context=ctx)
        return res, ledger

    def release(self, measured: Any, env: JobEnv) -> None:
        """Nothing is written while the cluster is up."""

    def write(self, measured: Any, env: JobEnv) -> tuple[dict[str, Any], dict[str, Any], MechanismResult]:
        """The synthetic tables (and links), ledger, config and report; on resume, files a killed attempt
        already wrote are kept as they are. Returns (ledger, report, the outputs as a ``MechanismResult``)."""
        from privcube.mechanisms.base import MechanismResult
        from privcube.relational.report_json import graph_link_frames
        from privcube.storage.outputs import synthetic_file

        res, ledger = measured
        job, rundir = self.job, env.rundir
        t0 = time.perf_counter()
        labels = bool(job.output.get("labels", True))
        synthetic = {name: labelled(frame, job.tables[name], labels) for name, frame in res.tables.items()}
        if job.multi:  # one (child key, parent key) file per foreign key, agreeing with the FK columns
            synthetic.update(graph_link_frames(job, res))
        else:  # the pairs, for one-to-many too (the child's FK column holds the same links)
            synthetic["links"] = res.links
        ledger_dict = composed_ledger(ledger, job, env.noise)
        report = self._graph_report(res, ledger_dict, env) if job.multi else self._report(res, env)

        def absent(name: str) -> bool:
            return not (env.resume and rundir.has(name))

        rundir.create()
        with rundir.writing("outputs"):
            todo = {n: f for n, f in synthetic.items() if absent(synthetic_file(n))}
            if todo:
                rundir.write_synthetic(todo)
            if absent("ledger.json"):
                rundir.write_json("ledger.json", ledger_dict)
            if absent("config.yaml"):
                rundir.write_config(job.resolved())
            env.timings["write_s"] = time.perf_counter() - t0
            env.timings["total_s"] = time.perf_counter() - env.t_start
            report["timings"] = env.timings
            if env.resume:
                report["resumed"] = True
            if absent("report.json"):
                rundir.write_json("report.json", report)
        return ledger_dict, report, MechanismResult([], report=report, synthetic=synthetic)

    def _report(self, res: Any, env: JobEnv) -> dict[str, Any]:
        """``report.json`` without its timings (see ``relational.report_json``)."""
        from privcube.relational.report_json import two_table_report

        return two_table_report(self.job, res, env.noise)

    def _graph_report(self, res: Any, ledger_dict: Mapping[str, Any], env: JobEnv) -> dict[str, Any]:
        """``report.json`` of a schema graph: per table and per link (see ``relational.report_json``)."""
        from privcube.relational.report_json import graph_report

        return graph_report(self.job, res, ledger_dict, env.noise)

    def publish(self, env: JobEnv) -> None:
        """Nothing: a relational job publishes no copies."""

    def completed(self, env: JobEnv) -> None:
        """A finished run is never resumed: its checkpoint (noisy, DP state only) is removed."""
        shutil.rmtree(env.rundir.path / CHECKPOINT_DIR, ignore_errors=True)


__all__ = ["CHECKPOINT_DIR", "LazyCheckpoint", "RelationalJobKind", "composed_ledger", "fingerprint"]
