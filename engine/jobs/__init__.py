"""Job kinds of the one driver: single-table (a mechanism answers a workload), relational (linked tables
synthesized) and census (tables by geographic level, consistent across levels). :func:`load_job` reads a config and returns the job of its kind (see :mod:`.kind`)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcube.jobs.kind import JobEnv, JobKind


def mechanism_name(raw: Mapping[str, Any]) -> Any:
    """The ``mechanism`` name of a raw config (a bare name or ``{name: ...}``)."""
    mech = raw.get("mechanism")
    return mech.get("name") if isinstance(mech, Mapping) else mech


def load_job(config: Any, data: Any = None, *, base: str | Path | None = None) -> JobKind:
    """The job a config describes: a file path, a mapping (relative paths against ``base``, default the
    working folder) or a ``JobConfig``; ``data`` stands in for ``data.path`` (single-table jobs only)."""
    from privcube.config import JobConfig
    from privcube.core.yaml_io import read_config_file
    from privcube.jobs.single_table import SingleTableJob

    if isinstance(config, JobConfig):
        return SingleTableJob.from_config(config, data)
    if isinstance(config, Mapping):
        raw, folder = dict(config), Path(base or ".").resolve()
    else:
        raw, folder = read_config_file(config)
    from privcube.census.spec import is_census

    if is_census(raw):  # a geography section: tables by level (privcube.census)
        from privcube.config import parse_cluster, parse_noise_sampler
        from privcube.jobs.census import CensusJobKind

        census = CensusJobKind.load(raw, folder, data)
        census.cluster, census.noise_sampler = parse_cluster(raw, folder), parse_noise_sampler(raw)
        return census
    if mechanism_name(raw) == "relational":
        from privcube.config import parse_cluster, parse_noise_sampler
        from privcube.relational.job import RelationalJobKind

        job = RelationalJobKind.load(raw, folder, data)  # its own sections
        job.cluster, job.noise_sampler = parse_cluster(raw, folder), parse_noise_sampler(raw)  # every kind's
        return job
    return SingleTableJob.load(raw, folder, data)


__all__ = ["JobEnv", "JobKind", "load_job", "mechanism_name"]
