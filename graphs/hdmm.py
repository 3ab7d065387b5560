"""Scatter HDMM's independent optimisations (restarts, per-factor / per-product OPT_0, OPT_M starts) over a client."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload
from privcube.mechanisms.hdmm.mechanism import select_strategy
from privcube.mechanisms.hdmm.opt_0 import Opt0Result, opt0
from privcube.mechanisms.hdmm.strategy import Strategy
from privcube.mechanisms.hdmm.subproblems import task_cost

LABEL = "hdmm-opt"


def cluster_mapper(client: Any, label: str = LABEL) -> Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]:
    """A mapper for :func:`select_strategy`: every subproblem one task on ``client`` (longest first).

    Task keys are ``{label}-{token}-{i}`` with a fresh token per batch, so batches never share keys."""
    def mapper(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        token = uuid.uuid4().hex[:8]
        cost = task_cost if fn.__name__ == "run_task" else None
        return map_tasks(fn, items, client=client, cost=cost, label=f"{label}-{token}")
    return mapper


def _opt0_task(args: tuple[np.ndarray, str, int, int | None]) -> Opt0Result:
    v, noise, seed, p = args
    return opt0(v, noise, restarts=1, seed=seed, p=p)


def opt0_restarts(v: np.ndarray, noise: str, *, restarts: int = 4, seed: int = 0, p: int | None = None,
                  client: Any = None) -> Opt0Result:
    """OPT_0 with each restart an independent task (seeds seed, seed+1, …); the lowest loss wins."""
    results = map_tasks(_opt0_task, [(v, noise, seed + r, p) for r in range(restarts)], client=client,
                        label=f"{LABEL}0-{uuid.uuid4().hex[:8]}")
    return min(results, key=lambda r: r.loss)


def select_strategy_on(client: Any, iw: ImplicitWorkload, noise: str, optimizer: str = "auto", restarts: int = 3,
                       seed: int = 0) -> tuple[Strategy, dict[str, float]]:
    """HDMM's meta-selection with each independent subproblem run as its own task on ``client``."""
    return select_strategy(iw, noise, optimizer, restarts, seed, mapper=cluster_mapper(client))
