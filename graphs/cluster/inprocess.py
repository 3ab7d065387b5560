"""In-process schedulers: ``none`` (dask's default, threads) and ``threads`` (a thread pool of a given size).

Neither starts anything nor imports ``distributed``: the scheduler is a function set in dask's config for
as long as the handle is open.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from privcube.core.params import Param
from privcube.graphs.cluster.kind import ClusterKind


def _in_process(options: Mapping[str, Any]) -> dict[str, Any]:
    """The layout of an in-process scheduler: its threads, no worker process."""
    from privcube.core.machine import cores

    return {"workers": 0, "threads": int(options.get("num_workers") or cores()), "kind": "in-process"}


class NoCluster(ClusterKind):
    """No cluster: dask's local threaded scheduler (the default); ``--workers`` makes it a LocalCluster."""

    name = "none"
    description = "no cluster: dask's threaded scheduler in this process (the default)"
    abilities = frozenset({"in-process", "sized-before-start", "workers-flag"})

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        return "local", {**options, "n_workers": workers}

    def planned_size(self, options: Mapping[str, Any]) -> dict[str, Any]:
        return _in_process(options)

    def open(self, handle: Any) -> Any:
        return None


class ThreadsKind(ClusterKind):
    """dask's threaded scheduler with ``num_workers`` threads, set in dask's config while the handle is open."""

    name = "threads"
    description = "a thread pool in this process (no worker processes, no distributed import)"
    abilities = frozenset({"in-process", "sized-before-start", "workers-flag"})
    OPTIONS = {"num_workers": Param(None, "int >= 1", "threads (default: dask's, one per usable core)")}

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        return self.name, {**options, "num_workers": workers}

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        """More threads than this machine can run are refused before anything starts."""
        from privcube.graphs.cluster.local import check_machine_size

        check_machine_size(self.name, options, flag)

    def planned_size(self, options: Mapping[str, Any]) -> dict[str, Any]:
        return _in_process(options)

    def open(self, handle: Any) -> Any:
        """In-process; the scheduler as a function, so that dask does not import distributed."""
        import dask
        import dask.threaded

        cfg: dict[str, Any] = {"scheduler": dask.threaded.get}
        if "num_workers" in handle.options:
            cfg["num_workers"] = handle.options["num_workers"]
        handle._config_ctx = dask.config.set(cfg)
        handle._config_ctx.__enter__()
        return None


__all__ = ["NoCluster", "ThreadsKind"]
