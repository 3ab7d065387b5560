"""Integer rounding of published marginals (``integer: true``): non-negative integers, one total.

Each marginal is rounded by the largest-remainder method (controlled rounding of a vector to a fixed
sum): every cell goes to the floor or the ceiling of its real value (so it stays ≥ 0 and moves by < 1),
and every marginal sums to the same integer total ``round(N)``. Ties go to the lower cell index, so the
result is deterministic. What is NOT kept in general: exact agreement of shared sub-marginals between
overlapping marginals (no rounding can keep it for every input: the 2×2 table [[.5, 0], [0, .5]] with
its one-way marginals (.5, .5) rounded to (1, 0) and (0, 1) has no consistent integer rounding);
a shared sub-marginal cell can differ between two cliques by less than the number of cells summed into it.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from privcube.postprocess.problem import Clique


def round_to_total(x: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers, each the floor or ceiling of ``x`` (≥ 0), summing to ``total``."""
    a = np.maximum(np.asarray(x, dtype=float), 0.0)
    flat = a.ravel()
    base = np.floor(flat)
    k = int(total - base.sum())
    rem = flat - base
    if k > 0:
        order = np.argsort(-rem, kind="stable")[:k]
        base[order] += 1
    elif k < 0:  # only when the input's sum exceeds total by more than rounding (defensive)
        order = np.argsort(rem, kind="stable")
        order = order[base[order] > 0][:-k]
        base[order] -= 1
    return base.astype(np.int64).reshape(a.shape)


def round_marginals(mu: Mapping[Clique, np.ndarray], total: float) -> tuple[dict[Clique, np.ndarray], int]:
    """Every marginal rounded to non-negative integers summing to ``round(total)`` (≥ 0)."""
    n = max(0, int(round(float(total))))
    return {c: round_to_total(a, n) for c, a in mu.items()}, n


__all__ = ["round_marginals", "round_to_total"]
