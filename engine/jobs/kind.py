"""What the one driver (``privcube.api.run``) asks of a kind of job, and what it hands the job while it runs.

The driver does the same for every job: load its config, take the run folder (``run_lock``), refuse
what cannot run before any data is read (a finished or foreign run folder, another run's checkpoint),
read the inputs, run under the cluster (a lost worker continues from the last checkpoint), write, mark
the run complete. A job kind (:mod:`privcube.jobs.single_table`, :mod:`privcube.relational.job`)
supplies its config, checkpoint identity (``fingerprint``), inputs, measurement and outputs.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class JobEnv:
    """One run as the driver sees it: folder, seed, resume, checkpoint, and, once the cluster is up, the
    noise source, client and the current attempt's run context (``privcube.core.context.RunContext``)."""

    rundir: Any  # privcube.storage.outputs.RunDirectory
    seed: int | None = None
    resume: bool = False
    quiet: bool = False
    checkpoint: Any = None
    noise: Any = None
    client: Any = None
    context: Any = None
    timings: dict[str, float] = field(default_factory=dict)
    t_start: float = field(default_factory=time.perf_counter)


class JobKind(Protocol):
    """A kind of job (single-table, relational), loaded from its config: the driver's only view of it."""

    mechanism: str  # the mechanism name recorded in the checkpoint's identity
    cluster: Mapping[str, Any]  # the config's cluster section
    noise_sampler: str

    def fingerprint(self) -> str:
        """Hash of what a resumed run must share with the original (data, domain, privacy, mechanism, ...)."""
        ...

    def open_checkpoint(self, rundir: Any, identity: Mapping[str, Any]) -> Any:
        """The run's checkpoint (``storage.checkpoint.RunCheckpoint`` or an adapter of it) for ``identity``."""
        ...

    def check_outputs(self, run_dir: Any) -> None:
        """Refuse, before any data is read, outputs that would land on the inputs (data, schemas, links) or
        on each other: the run folder and any published copy (``storage.placement.check_placement``)."""
        ...

    def check_before_data(self, *, replace: bool) -> None:
        """Refuse, before any data is read, what would fail later (published copies, mechanism options)."""
        ...

    def read_inputs(self, env: JobEnv) -> Any:
        """Open or read the private inputs, validated against the public schema; writes nothing."""
        ...

    def start(self, inputs: Any, env: JobEnv) -> Any:
        """Under the cluster, once: the data source the measurement reads (and the run folder, if it is made now)."""
        ...

    def measure(self, source: Any, env: JobEnv) -> Any:
        """One attempt of the mechanism under a fresh ledger (``env.context``: checkpoint, resume, execution)."""
        ...

    def release(self, measured: Any, env: JobEnv) -> None:
        """Under the cluster, after measuring: what is written while it is up (ledger, post-processing, records)."""
        ...

    def write(self, measured: Any, env: JobEnv) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """The run's outputs and ``report.json``; returns what the run wrote: (ledger, report, its
        ``MechanismResult``), which the driver returns as a ``privcube.result.RunSummary``."""
        ...

    def publish(self, env: JobEnv) -> None:
        """Copies of outputs the config asks for, just before the run is marked complete."""
        ...

    def completed(self, env: JobEnv) -> None:
        """After the run is marked complete (e.g. remove a checkpoint no longer needed)."""
        ...


__all__ = ["JobEnv", "JobKind"]
