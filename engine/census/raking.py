"""Raking (iterative proportional fitting, Deming & Stephan 1940) of a children-by-cells array to its margins.

A margin is either a sum over one axis of the array (within a unit: e.g. a 2-way table's a-margin) or a sum
of the children of each parent (``segment``: the children are contiguous rows, see :mod:`.hierarchy`), so one
sweep over every parent of a level is a handful of vectorised numpy operations. Raking keeps zeros at zero and
converges to the KL-closest array with the margins whenever the margins are feasible on its support.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: stop when every margin's max relative error (|sum − target| / max(target, 1)) is at most this
TOLERANCE = 1e-12
#: a raking counts as converged at this error (the consistency bar of issue 35); below it, a raking that
#: stops improving (targets consistent only to rounding, e.g. a parent's margins summed in another order)
#: stops after STALL sweeps without halving its error
ACCEPT = 1e-9
STALL = 10
#: largest factor of one step (a margin summing to a denormal would otherwise overflow to inf, then nan)
MAX_FACTOR = 1e100


@dataclass(frozen=True)
class Margin:
    """A margin of the array: ``axis`` (sum over that axis) or, when ``parent`` is given, the segment sums of
    axis 0 (``starts`` of each parent's block of children); ``target`` has the margin's shape."""

    target: np.ndarray
    axis: int = 0
    starts: np.ndarray | None = None
    parent: np.ndarray | None = None

    def of(self, x: np.ndarray) -> np.ndarray:
        """The margin of ``x``."""
        if self.parent is not None:
            return np.add.reduceat(x, self.starts, axis=0)
        return x.sum(axis=self.axis)

    def spread(self, f: np.ndarray) -> np.ndarray:
        """A per-margin-entry factor broadcast back onto the array."""
        if self.parent is not None:
            return f[self.parent]
        return np.expand_dims(f, self.axis)


def segment_margin(target: np.ndarray, starts: np.ndarray, parent: np.ndarray) -> Margin:
    """The children-sum-to-parent margin (rows = children, grouped by parent)."""
    return Margin(np.asarray(target, dtype=np.float64), starts=starts, parent=parent)


def relative_error(current: np.ndarray, target: np.ndarray) -> float:
    """max |current − target| / max(|target|, 1) (0 for empty margins)."""
    if current.size == 0:
        return 0.0
    return float(np.max(np.abs(current - target) / np.maximum(np.abs(target), 1.0)))


def rake(x: np.ndarray, margins: Sequence[Margin], *, tol: float = TOLERANCE, max_sweeps: int = 2000
         ) -> tuple[np.ndarray, dict[str, Any]]:
    """Scale ``x`` (>= 0) to each margin in turn until every one holds to ``tol`` (or, once within ACCEPT, stops
    improving); the LAST margin holds exactly (to rounding) when the loop stops. Returns (x, {"iterations",
    "max_residual", "converged"}), converged = every margin within ACCEPT."""
    x = np.array(x, dtype=np.float64)
    sweeps = 0
    best, since = np.inf, 0
    for sweeps in range(1, max_sweeps + 1):
        err = 0.0
        for m in margins:
            cur = m.of(x)
            err = max(err, relative_error(cur, m.target))
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                f = np.where(cur > 0, m.target / np.where(cur > 0, cur, 1.0), 0.0)
            x *= m.spread(np.minimum(f, MAX_FACTOR))
        if err <= tol:
            break
        best, since = (err, 0) if err < best / 2 else (best, since + 1)
        if best <= ACCEPT and since >= STALL:
            break
    residual = max(relative_error(m.of(x), m.target) for m in margins)
    return x, {"iterations": sweeps, "max_residual": residual, "converged": residual <= max(tol, ACCEPT)}
