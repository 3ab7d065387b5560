"""Scatter QuerySmasher's independent part solves over a dask client (largest first)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.querysmasher.decomposition import Part
from privcube.mechanisms.querysmasher.solvers import NEWTON_LIMIT, PartSolution, solve_part


def _solve_task(item: tuple[Part, str, float, int, float, int]) -> PartSolution:
    part, method, tol, sdp_limit, newton_limit, dense_limit = item
    return solve_part(part, method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit,
                      dense_limit=dense_limit)


def solve_parts(parts: Sequence[Part], *, method: str = "auto", tol: float = 1e-4, sdp_limit: int = 40,
                newton_limit: float = NEWTON_LIMIT, dense_limit: int = 4096,
                client: Any = None) -> list[PartSolution]:
    """Solve each distinct part once; with a client, one task per part, the biggest submitted first.

    Parts above ``dense_limit`` cells are solved in factored form (see ``solvers.solve_part``)."""
    items = [(p, method, tol, sdp_limit, newton_limit, dense_limit) for p in parts]
    return map_tasks(_solve_task, items, client=client, cost=lambda it: float(it[0].size) ** 3,
                     label="querysmasher-solve", title="querysmasher: solving parts")
