"""Random-slicing sub-blocks of one relational iteration as independent tasks on a Dask client.

The mechanism itself runs its slices through the run context's ``map``; this is the same thing for a
caller holding a client (the graphs layer depends on the engine, never the other way round).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privcube.graphs.scatter import map_tasks
from privcube.relational.solvers.slicing import SliceTask, block_cells, solve_slice


def solve_slices(tasks: Sequence[SliceTask], *, client: Any = None,
                 label: str = "relational-slice") -> list[tuple[np.ndarray, np.ndarray]]:
    """Solve disjoint slices (PGD + rounding) in parallel; results in input order, identical to serial runs.

    ``label`` must be unique per call (e.g. include the iteration) so task keys never collide.
    """
    return map_tasks(solve_slice, list(tasks), client=client, cost=lambda t: float(block_cells(t.B0)), label=label)


__all__ = ["solve_slices"]
