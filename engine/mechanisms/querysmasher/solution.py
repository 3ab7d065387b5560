"""QuerySmasher's answer for one Kronecker part: a cost-1 strategy, its error and its certificate."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.linalg.psd import psd_pinv


@dataclass
class PartSolution:
    """A cost-1 strategy for one Gram: V⁺, the strategy B (BᵀB = V), error L and certificate.

    Dense solutions hold V⁺ (c × c) and the symmetric root B (c × c). Factored (low-rank) solutions
    hold ``vpinv = None``, ``vfac`` (c × r, V⁺ = vfac vfacᵀ = B⁺B⁺ᵀ) and B (r × c): nothing c × c.
    """

    L: float
    vpinv: np.ndarray | None
    b: np.ndarray
    method: str
    dual: float = float("nan")
    info: dict[str, Any] = field(default_factory=dict)
    vfac: np.ndarray | None = None

    @property
    def gap(self) -> float:
        """Relative duality gap (primal − dual) / primal (0 = certified optimal)."""
        if not math.isfinite(self.dual) or self.L <= 0:
            return float("nan")
        return max(self.L - self.dual, 0.0) / self.L

    def pinv_dense(self) -> np.ndarray:
        """V⁺ as a dense c × c matrix (materialised for factored solutions)."""
        if self.vpinv is not None:
            return self.vpinv
        return self.vfac @ self.vfac.T

    def quad(self, q: np.ndarray) -> np.ndarray:
        """Row-wise q V⁺ qᵀ for query rows q (m × c): the cost-1 variance of each row."""
        q = np.asarray(q, dtype=float)
        if self.vfac is not None:
            return np.sum((q @ self.vfac) ** 2, axis=1)
        return np.sum((q @ self.vpinv) * q, axis=1)

    def trace_rows(self, p: np.ndarray) -> float:
        """tr(PᵀP V⁺) for rows P (m × c): the cost-1 error of those rows summed."""
        return float(np.sum(self.quad(p)))

    def trace_gram(self, g: np.ndarray) -> float:
        """tr(G V⁺) for a dense Gram G (c × c)."""
        if self.vfac is not None:
            return float(np.sum((g @ self.vfac) * self.vfac))
        return float(np.sum(np.asarray(g) * self.vpinv))

    def b_pinv(self) -> np.ndarray:
        """B⁺ (reconstruction of the measured residual from ω = Bx + noise)."""
        if self.vfac is not None:
            return self.vfac
        return psd_pinv(self.b)
