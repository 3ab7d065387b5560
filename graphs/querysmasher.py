"""Scatter QuerySmasher's independent part solves over a dask client (largest first)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.querysmasher.decomposition import Part
from privcube.mechanisms.querysmasher.solvers import NEWTON_LIMIT, PartSolution, solve


def _solve_task(item: tuple[Part, str, float, int, float]) -> PartSolution:
    part, method, tol, sdp_limit, newton_limit = item
    return solve(part.gram(), part.shape, method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit)


def solve_parts(parts: Sequence[Part], *, method: str = "auto", tol: float = 1e-4, sdp_limit: int = 40,
                newton_limit: float = NEWTON_LIMIT, client: Any = None) -> list[PartSolution]:
    """Solve each distinct part once; with a client, one task per part, the biggest submitted first."""
    items = [(p, method, tol, sdp_limit, newton_limit) for p in parts]
    return map_tasks(_solve_task, items, client=client, cost=lambda it: float(it[0].size) ** 3,
                     label="querysmasher-solve")
