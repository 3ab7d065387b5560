"""Scatter HDMM's independent optimisations (restarts, per-factor / per-product OPT_0, OPT_M starts) over a client."""
from __future__ import annotations

import functools
import uuid
from typing import Any

import numpy as np

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload
from privcube.mechanisms.hdmm.mechanism import select_strategy
from privcube.mechanisms.hdmm.opt_0 import Opt0Result, opt0
from privcube.mechanisms.hdmm.strategy import Strategy
from privcube.mechanisms.hdmm.subproblems import LABEL, Mapper, task_mapper


def cluster_mapper(client: Any, label: str = LABEL) -> Mapper:
    """A mapper for :func:`select_strategy`: every subproblem one task on ``client`` (longest first).

    Task keys are ``{label}-{token}-{i}`` with a fresh token per batch, so batches never share keys."""
    return task_mapper(functools.partial(map_tasks, client=client), label)


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


#: rows of y per noise block in :func:`chunked_release` (the block index keys the noise stream)
RELEASE_BLOCK = 2**22


def strategy_matvec_dask(strategy: Strategy, x: Any) -> Any:
    """A x as a task graph over a chunked dask vector x: one tensordot per Kronecker factor (OPT_0/⊗, each
    OPT_+ block) or one axis sum per weighted marginal (OPT_M)."""
    import dask.array as da

    from privcube.graphs.kron import kron_matvec_dask
    from privcube.linalg.marginals import kept_axes
    from privcube.mechanisms.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy

    if isinstance(strategy, KronStrategy):
        return kron_matvec_dask(strategy.factors, x)
    if isinstance(strategy, UnionStrategy):
        return da.concatenate([float(c) * kron_matvec_dask(b.factors, x) for c, b in zip(strategy.weights, strategy.blocks)])
    if isinstance(strategy, MarginalStrategy):
        d = len(strategy.shape)
        t = x.reshape(strategy.shape)
        parts = []
        for a in np.flatnonzero(strategy.theta):
            keep = kept_axes(int(a), d)
            drop = tuple(i for i in range(d) if i not in keep)
            parts.append(float(strategy.theta[a]) * (t.sum(axis=drop) if drop else t).reshape(-1))
        return da.concatenate(parts)
    raise TypeError(f"no chunked matvec for strategy {type(strategy).__name__}")


def _add_noise(block: np.ndarray, kind: str, scale: float, key: tuple, noise: Any,
               block_info: dict | None = None) -> np.ndarray:
    i = block_info[0]["chunk-location"][0] if block_info else 0
    draw = noise.laplace if kind == "laplace" else noise.gaussian
    return block + draw((*key, "block", i), block.shape, scale)


def chunked_release(x: Any, strategy: Strategy, kind: str, scale: float, key: tuple, noise: Any, *,
                    block: int | None = None) -> np.ndarray:
    """y = A x + noise for an exact data vector x held as a lazy chunked dask array (e.g. a marginal counted
    on the workers), computed as one task graph: the noise is added per block of ``block`` rows next to the
    block (stream keyed by ``key`` and the block index), so only the noisy y is ever computed here.
    ``block`` defaults to :data:`RELEASE_BLOCK`."""
    import dask.array as da

    if not isinstance(x, da.Array):
        x = da.from_array(np.asarray(x))
    y = strategy_matvec_dask(strategy, x.reshape(-1).astype(float)).rechunk(block or RELEASE_BLOCK)
    return y.map_blocks(_add_noise, kind, scale, key, noise, dtype=float).compute()
