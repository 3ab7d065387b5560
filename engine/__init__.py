"""privcube: differentially private query answering and synthetic data on Dask, out of core."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privcube.core.domain import Domain
from privcube.core.errors import (
    BudgetError,
    ConfigError,
    DataError,
    DomainError,
    MemoryLimitError,
    PrivcubeError,
    WorkloadError,
)
from privcube.core.workload import QueryGroup, Workload

if TYPE_CHECKING:
    from privcube.mechanisms.base import PlanSummary
    from privcube.result import Result

from privcube.core import __version__

__all__ = [
    "Domain", "Workload", "QueryGroup", "PrivcubeError", "DomainError", "DataError", "WorkloadError",
    "BudgetError", "ConfigError", "MemoryLimitError", "Result", "run", "plan", "__version__",
]


def run(config: str | Path | Mapping[str, Any], out: str | Path, *, data: Any = None, seed: int | None = None,
        **kwargs: Any) -> Result:
    """Run a job (a config file path or mapping) and write the run directory ``out``; returns a
    :class:`privcube.Result`. ``data``: a pandas/polars DataFrame, a path or a list of paths standing in
    for ``data.path``; ``seed`` makes the noise reproducible (not for releases). See ``privcube.api.run``."""
    from privcube import api

    return api.run(config, out, data=data, seed=seed, **kwargs)


def plan(config: str | Path | Mapping[str, Any]) -> PlanSummary:
    """The data-independent plan of a batch mechanism as data (a ``PlanSummary``: ``rmse``, ``privacy``,
    ``groups``, ``measurements``; ``.to_dict()``, ``.to_frame()``); reads no data."""
    from privcube import api

    return api.plan(config)


def __getattr__(name: str) -> Any:  # lazy: importing privcube stays light
    if name == "Result":
        from privcube.result import Result

        return Result
    raise AttributeError(f"module 'privcube' has no attribute {name!r}")
