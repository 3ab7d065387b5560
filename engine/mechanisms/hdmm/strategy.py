"""HDMM strategies: measure y = A x, reconstruct per workload term, per-query variances.

Every strategy has unit sensitivity in its noise's norm by construction; ``sensitivity`` computes it
exactly anyway and the mechanism calibrates noise to that value. Variances are per unit noise variance
per strategy row.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from privcube.linalg.marginals import MarginalsStrategy, g_inverse_weights, marginal_query_variances
from privcube.linalg.matrices import DENSE_LIMIT, Kronecker, Matrix, VStack, Weighted, kron_apply

Terms = Sequence[tuple[float, Sequence[np.ndarray]]]


def _kron_term_variance(pinv_grams: Sequence[np.ndarray], factors: Sequence[np.ndarray]) -> np.ndarray:
    """diag(W (AᵀA)⁺ Wᵀ) for Kronecker W and A, as a Kronecker product of per-factor diagonals."""
    parts = [np.einsum("ij,jk,ik->i", f, g, f) for f, g in zip(factors, pinv_grams)]
    return reduce(np.kron, parts)


class Strategy(ABC):
    """A measurement strategy with its optimiser's loss ‖A‖_K²‖WA⁺‖_F²."""

    kind: str
    loss: float

    @abstractmethod
    def rows(self) -> int:
        """Number of noisy measurements."""

    @abstractmethod
    def sensitivity(self, p: int) -> float:
        """Largest column L1/L2 norm of the whole strategy."""

    @abstractmethod
    def operator(self) -> Matrix:
        """A as a ``privcube.linalg`` operator (what a cluster kernel needs to measure it as a task graph)."""

    @abstractmethod
    def measure(self, x: np.ndarray) -> np.ndarray:
        """A x (exact; the mechanism adds the noise)."""

    @abstractmethod
    def answer(self, y: np.ndarray, terms: Terms) -> list[np.ndarray]:
        """W_j x̂ for every term (unweighted), from noisy y."""

    @abstractmethod
    def variances(self, terms: Terms) -> list[np.ndarray]:
        """Per-query variance of each term's answers, per unit noise variance per row."""

    def describe(self) -> dict:
        """JSON-able summary."""
        return {"strategy": self.kind, "rows": self.rows(), "loss": self.loss}


@dataclass
class KronStrategy(Strategy):
    """⊗ A_i (OPT_0 when there is one block, OPT_⊗ otherwise)."""

    factors: list[np.ndarray]
    loss: float
    kind: str = "kron"
    _pinv: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._pinv = [np.linalg.pinv(f) for f in self.factors]
        self._pgram = [p @ p.T for p in self._pinv]  # (AᵀA)⁺ = A⁺A⁺ᵀ

    def rows(self) -> int:
        return math.prod(f.shape[0] for f in self.factors)

    def sensitivity(self, p: int) -> float:
        return Kronecker(self.factors).sensitivity(p)

    def operator(self) -> Matrix:
        return Kronecker(self.factors)

    def measure(self, x: np.ndarray) -> np.ndarray:
        return kron_apply(self.factors, x)

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        """x̂ = A⁺ y by factors."""
        return kron_apply(self._pinv, y)

    def answer(self, y: np.ndarray, terms: Terms) -> list[np.ndarray]:
        xhat = self.reconstruct(y)
        return [kron_apply(list(f), xhat) for _, f in terms]

    def variances(self, terms: Terms) -> list[np.ndarray]:
        return [_kron_term_variance(self._pgram, f) for _, f in terms]

    def describe(self) -> dict:
        return {**super().describe(), "factor_shapes": [list(f.shape) for f in self.factors]}


@dataclass
class UnionStrategy(Strategy):
    """Stack of c_j 𝔸_j, one Kronecker block per workload term, local least squares (OPT_+)."""

    weights: np.ndarray
    blocks: list[KronStrategy]
    loss: float
    kind: str = "union"

    def rows(self) -> int:
        return sum(b.rows() for b in self.blocks)

    def sensitivity(self, p: int) -> float:
        n = math.prod(f.shape[1] for f in self.blocks[0].factors)
        if n <= DENSE_LIMIT:
            if p == 1:
                col = sum(c * Kronecker(b.factors).column_norms_l1() for c, b in zip(self.weights, self.blocks))
                return float(np.max(col))
            col = sum(c**2 * Kronecker(b.factors).column_norms_sq() for c, b in zip(self.weights, self.blocks))
            return float(math.sqrt(np.max(col)))
        if p == 1:
            return float(sum(c * b.sensitivity(1) for c, b in zip(self.weights, self.blocks)))
        return math.sqrt(sum(c**2 * b.sensitivity(2) ** 2 for c, b in zip(self.weights, self.blocks)))

    def operator(self) -> Matrix:
        return VStack([Weighted(b.operator(), c) for c, b in zip(self.weights, self.blocks)])

    def measure(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([c * b.measure(x) for c, b in zip(self.weights, self.blocks)])

    def answer(self, y: np.ndarray, terms: Terms) -> list[np.ndarray]:
        out, o = [], 0
        for (c, b), (_, f) in zip(zip(self.weights, self.blocks), terms):
            k = b.rows()
            out.append(kron_apply(list(f), b.reconstruct(y[o:o + k]) / c))
            o += k
        return out

    def variances(self, terms: Terms) -> list[np.ndarray]:
        return [b.variances([t])[0] / c**2 for c, b, t in zip(self.weights, self.blocks, terms)]

    def describe(self) -> dict:
        return {**super().describe(), "weights": [float(c) for c in self.weights]}


@dataclass
class MarginalStrategy(Strategy):
    """𝕄(θ): weighted marginals (OPT_M), reconstructed with the restricted generalised inverse."""

    shape: tuple[int, ...]
    theta: np.ndarray
    loss: float
    kind: str = "marginals"

    def __post_init__(self) -> None:
        self._m = MarginalsStrategy(self.shape, self.theta)
        self._eta = g_inverse_weights(self.theta**2, self.shape)

    def rows(self) -> int:
        return self._m.shape[0]

    def sensitivity(self, p: int) -> float:
        return self._m.sensitivity(p)

    def operator(self) -> Matrix:
        return self._m

    def measure(self, x: np.ndarray) -> np.ndarray:
        return self._m.matvec(x)

    def answer(self, y: np.ndarray, terms: Terms) -> list[np.ndarray]:
        xhat = self._m.pinv().matvec(y)
        return [kron_apply(list(f), xhat) for _, f in terms]

    def variances(self, terms: Terms) -> list[np.ndarray]:
        return [marginal_query_variances(self._eta, f) for _, f in terms]

    def describe(self) -> dict:
        d = len(self.shape)
        kept = {format(int(a), f"0{d}b"): float(self.theta[a]) for a in np.flatnonzero(self.theta)}
        return {**super().describe(), "marginals": kept}
