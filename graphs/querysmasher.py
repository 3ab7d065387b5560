"""Scatter QuerySmasher's independent part solves over a dask client (largest first)."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from privcube.graphs.scatter import map_tasks
from privcube.mechanisms.querysmasher import solvers
from privcube.mechanisms.querysmasher.decomposition import Part
from privcube.mechanisms.querysmasher.solution import PartSolution


def solve_parts(parts: Sequence[Part], *, method: str = "auto", tol: float = 1e-4, sdp_limit: int = 40,
                newton_limit: float = solvers.NEWTON_LIMIT, dense_limit: int = 4096,
                client: Any = None) -> list[PartSolution]:
    """Solve each distinct part once; with a client, one task per part, the biggest submitted first.

    Parts above ``dense_limit`` cells are solved in factored form (see ``solvers.solve_part``)."""
    return solvers.solve_parts(parts, method=method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit,
                               dense_limit=dense_limit, map=functools.partial(map_tasks, client=client))
