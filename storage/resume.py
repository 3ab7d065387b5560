"""``--resume`` checks made before any data is read: the run folder was started by this run (same mechanism,
seed and config, recorded in ``.started`` when the folder was made, so it holds before the first
checkpoint too), the checkpoint belongs to this run, and an unseeded run that left outputs but no
checkpoint is not measured a second time.

Without a checkpoint a resumed run starts its mechanism again. That is safe when nothing was released or
the run is seeded (identical noise); an unseeded run whose outputs were partly written would release a
second, independent measurement, so it is refused. A folder that is not a privcube run is refused before
this (``RunDirectory.check_usable``).
"""
from __future__ import annotations

from typing import Any

from privcube.core.errors import CheckpointError, RunDirectoryError

#: what an interrupted run may have released already (relative to the run directory)
PARTIAL_OUTPUTS = ("answers/*.parquet", "synthetic/*")
LEDGER_FILE = "ledger.json"


def check_started_by_this_run(rundir: Any) -> None:
    """CheckpointError (one line, naming what differs) if ``.started`` records another mechanism, seed or
    config than ``rundir.identity``; nothing to compare for a run folder from before the record."""
    from privcube.storage.checkpoint import describe_mismatch

    recorded, current = rundir.recorded_identity(), rundir.identity
    if recorded is None or current is None or recorded == current:
        return
    raise CheckpointError(f"--resume: run folder {str(rundir.path)!r} belongs to a different run: "
                          f"{describe_mismatch(recorded, current)}; resume with the config and seed it was started "
                          "with, or choose a new --out")


def check_resumable(rundir: Any, checkpoint: Any, seed: int | None) -> int | None:
    """After :func:`check_started_by_this_run`: the round of ``checkpoint`` (CheckpointError if it belongs to
    another mechanism, seed or config), or None when there is none; then a RunDirectoryError if the run is
    unseeded and outputs were written."""
    check_started_by_this_run(rundir)
    done = checkpoint.check_identity() if checkpoint is not None else None
    if done is not None or seed is not None:
        return done
    path = rundir.path
    partial = sorted(p.name for p in (*(q for pattern in PARTIAL_OUTPUTS for q in path.glob(pattern)),
                                      path / LEDGER_FILE) if p.exists())
    if partial:
        raise RunDirectoryError(
            f"--resume: {str(path)!r} holds partly written outputs ({len(partial)} files) of an unseeded run "
            "without a checkpoint; rerunning would draw fresh noise and release a second measurement. "
            "Choose a new --out")
    return None


__all__ = ["PARTIAL_OUTPUTS", "check_resumable", "check_started_by_this_run"]
