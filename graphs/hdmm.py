"""Scatter HDMM's independent optimisations (optimisers, OPT_0 restarts) over a dask client."""
from __future__ import annotations

from typing import Any

import numpy as np

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload
from privcube.mechanisms.hdmm.mechanism import select_strategy
from privcube.mechanisms.hdmm.opt_0 import Opt0Result, opt0
from privcube.mechanisms.hdmm.strategy import Strategy


def _opt0_task(args: tuple[np.ndarray, str, int, int | None]) -> Opt0Result:
    v, noise, seed, p = args
    return opt0(v, noise, restarts=1, seed=seed, p=p)


def opt0_restarts(v: np.ndarray, noise: str, *, restarts: int = 4, seed: int = 0, p: int | None = None,
                  client: Any = None) -> Opt0Result:
    """OPT_0 with each restart an independent task (seeds seed, seed+1, …); the lowest loss wins."""
    results = map_tasks(_opt0_task, [(v, noise, seed + r, p) for r in range(restarts)], client=client,
                        label="hdmm-opt0")
    return min(results, key=lambda r: r.loss)


def select_strategy_on(client: Any, iw: ImplicitWorkload, noise: str, optimizer: str = "auto", restarts: int = 3,
                       seed: int = 0) -> tuple[Strategy, dict[str, float]]:
    """HDMM's meta-selection with each candidate optimiser run as its own task on ``client``."""
    return select_strategy(iw, noise, optimizer, restarts, seed,
                           mapper=lambda fn, items: map_tasks(fn, items, client=client, label="hdmm-opt"))
