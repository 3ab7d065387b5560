"""``run_relational_job``: a relational job config (mechanism ``relational``) run by the one driver.

The job kind itself is :mod:`privcube.jobs.relational` (layout of the run folder, composition convention,
resume); reading its inputs is :mod:`privcube.jobs.relational_inputs`. This module keeps the entry point
that takes an already parsed config and the folder its relative paths are resolved against.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcube.jobs.relational_inputs import read_inputs


def run_relational_job(raw: Mapping[str, Any], base: str | Path, out: str | Path, *, seed: int | None = None,
                       resume: bool = False, scheduler_address: str | None = None, scheduler_file: str | None = None,
                       workers: int | None = None, client: Any = None, quiet: bool = False) -> Any:
    """Run a relational job config (relative paths against ``base``) and write the run directory ``out``;
    returns a ``privcube.Result``. The run owns ``out`` for its whole duration (``storage.outputs.run_lock``,
    taken before any data is read): a second run on the same folder is refused."""
    from privcube.api import run_job
    from privcube.storage.outputs import run_lock

    with run_lock(out):
        from privcube.jobs.relational import RelationalJobKind
        from privcube.relational_config import load_relational_config

        job = RelationalJobKind(load_relational_config(raw, base))
        return run_job(job, out, seed=seed, resume=resume, scheduler_address=scheduler_address,
                       scheduler_file=scheduler_file, workers=workers, client=client, quiet=quiet)


__all__ = ["read_inputs", "run_relational_job"]
