"""Implicit matrices: explicit, Kronecker, vertical stack (union), weighted, sum, marginal strategies.

Every matrix acts on a data vector indexed row-major over its domain (first factor slowest), the order
``np.kron`` implies. Nothing here forms a Kronecker product unless ``dense()`` is asked for.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import reduce

import numpy as np

from privcube.core.errors import MemoryLimitError, WorkloadError
from privcube.core.kron import kron_matvec

DENSE_LIMIT = 2**26  # entries; dense() refuses to build larger matrices


def kron_apply(factors: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    """``kron(*factors) @ x`` without forming the product (delegates to ``privcube.core.kron``)."""
    n = math.prod(f.shape[1] for f in factors)
    x = np.asarray(x, dtype=float)
    if x.shape[0] != n:
        raise WorkloadError(f"vector has length {x.shape[0]}, Kronecker product has {n} columns")
    return np.asarray(kron_matvec(list(factors), x), dtype=float)


class Matrix(ABC):
    """A linear map given implicitly; ``shape`` is (rows, columns)."""

    shape: tuple[int, int]

    @abstractmethod
    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``A @ x``."""

    @abstractmethod
    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """``A.T @ y``."""

    @abstractmethod
    def column_norms_l1(self) -> np.ndarray:
        """L1 norm of every column (length n)."""

    @abstractmethod
    def column_norms_sq(self) -> np.ndarray:
        """Squared L2 norm of every column (length n)."""

    def gram(self) -> Matrix:
        """``AᵀA`` as an implicit matrix (dense fallback)."""
        d = self.dense()
        return Explicit(d.T @ d)

    def pinv(self) -> Matrix:
        """Moore–Penrose pseudo-inverse (dense fallback; structured types override)."""
        return Explicit(np.linalg.pinv(self.dense()))

    def sensitivity(self, p: int) -> float:
        """Largest column L1 (``p=1``) or L2 (``p=2``) norm: the mechanism's sensitivity."""
        if p == 1:
            return float(np.max(self.column_norms_l1()))
        if p == 2:
            return float(np.sqrt(np.max(self.column_norms_sq())))
        raise WorkloadError(f"sensitivity norm p must be 1 or 2, got {p!r}")

    def frobenius_sq(self) -> float:
        """``‖A‖_F²``."""
        return float(np.sum(self.column_norms_sq()))

    def dense(self) -> np.ndarray:
        """The explicit matrix (small matrices only)."""
        m, n = self.shape
        if m * n > DENSE_LIMIT:
            raise MemoryLimitError(f"refusing to form a dense {m}x{n} matrix (limit {DENSE_LIMIT} entries)")
        return np.column_stack([self.matvec(e) for e in np.eye(n)]) if n else np.zeros((m, 0))

    @property
    def T(self) -> Matrix:  # noqa: N802 - numpy convention
        """The transpose, implicitly."""
        return Transpose(self)


class Explicit(Matrix):
    """A dense numpy matrix."""

    def __init__(self, a: np.ndarray) -> None:
        a = np.atleast_2d(np.asarray(a, dtype=float))
        if a.ndim != 2:
            raise WorkloadError(f"explicit matrix must be 2-D, got shape {a.shape}")
        self.a = a
        self.shape = a.shape

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return self.a @ x

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return self.a.T @ y

    def column_norms_l1(self) -> np.ndarray:
        return np.abs(self.a).sum(axis=0)

    def column_norms_sq(self) -> np.ndarray:
        return (self.a**2).sum(axis=0)

    def gram(self) -> Explicit:
        return Explicit(self.a.T @ self.a)

    def pinv(self) -> Explicit:
        return Explicit(np.linalg.pinv(self.a))

    def dense(self) -> np.ndarray:
        return self.a


class Transpose(Matrix):
    """``Aᵀ`` of an implicit matrix."""

    def __init__(self, base: Matrix) -> None:
        self.base = base
        self.shape = (base.shape[1], base.shape[0])

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return self.base.rmatvec(x)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return self.base.matvec(y)

    def column_norms_l1(self) -> np.ndarray:
        return np.abs(self.base.dense()).sum(axis=1)

    def column_norms_sq(self) -> np.ndarray:
        return (self.base.dense() ** 2).sum(axis=1)


class Kronecker(Matrix):
    """``A_1 ⊗ … ⊗ A_d`` stored as its factors."""

    def __init__(self, factors: Sequence[np.ndarray | Matrix]) -> None:
        if not factors:
            raise WorkloadError("a Kronecker product needs at least one factor")
        self.factors = [f.dense() if isinstance(f, Matrix) else np.atleast_2d(np.asarray(f, dtype=float))
                        for f in factors]
        self.shape = (math.prod(f.shape[0] for f in self.factors), math.prod(f.shape[1] for f in self.factors))

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return kron_apply(self.factors, x)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return kron_apply([f.T for f in self.factors], y)

    def column_norms_l1(self) -> np.ndarray:
        return reduce(np.kron, [np.abs(f).sum(axis=0) for f in self.factors])

    def column_norms_sq(self) -> np.ndarray:
        return reduce(np.kron, [(f**2).sum(axis=0) for f in self.factors])

    def sensitivity(self, p: int) -> float:
        """Theorem 3: the product of the factor sensitivities."""
        return math.prod(Explicit(f).sensitivity(p) for f in self.factors)

    def frobenius_sq(self) -> float:
        return math.prod(float((f**2).sum()) for f in self.factors)

    def gram(self) -> Kronecker:
        return Kronecker([f.T @ f for f in self.factors])

    def pinv(self) -> Kronecker:
        return Kronecker([np.linalg.pinv(f) for f in self.factors])

    def dense(self) -> np.ndarray:
        m, n = self.shape
        if m * n > DENSE_LIMIT:
            raise MemoryLimitError(f"refusing to form a dense {m}x{n} Kronecker product")
        return reduce(np.kron, self.factors)


class Weighted(Matrix):
    """``w · A``."""

    def __init__(self, base: Matrix | np.ndarray, weight: float) -> None:
        self.base = base if isinstance(base, Matrix) else Explicit(base)
        self.weight = float(weight)
        self.shape = self.base.shape

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return self.weight * self.base.matvec(x)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return self.weight * self.base.rmatvec(y)

    def column_norms_l1(self) -> np.ndarray:
        return abs(self.weight) * self.base.column_norms_l1()

    def column_norms_sq(self) -> np.ndarray:
        return self.weight**2 * self.base.column_norms_sq()

    def sensitivity(self, p: int) -> float:
        return abs(self.weight) * self.base.sensitivity(p)

    def frobenius_sq(self) -> float:
        return self.weight**2 * self.base.frobenius_sq()

    def gram(self) -> Matrix:
        return Weighted(self.base.gram(), self.weight**2)

    def pinv(self) -> Matrix:
        if self.weight == 0:
            return Weighted(Transpose(self.base), 0.0)
        return Weighted(self.base.pinv(), 1.0 / self.weight)

    def dense(self) -> np.ndarray:
        return self.weight * self.base.dense()


class VStack(Matrix):
    """Rows of several matrices stacked: a union of query sets (``[A_1; …; A_k]``)."""

    def __init__(self, blocks: Sequence[Matrix | np.ndarray]) -> None:
        if not blocks:
            raise WorkloadError("a stack needs at least one block")
        self.blocks = [b if isinstance(b, Matrix) else Explicit(b) for b in blocks]
        n = {b.shape[1] for b in self.blocks}
        if len(n) != 1:
            raise WorkloadError(f"stacked blocks disagree on the number of columns: {sorted(n)}")
        self.shape = (sum(b.shape[0] for b in self.blocks), n.pop())
        self._offsets = np.cumsum([0] + [b.shape[0] for b in self.blocks])

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([b.matvec(x) for b in self.blocks])

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        o = self._offsets
        return sum(b.rmatvec(y[o[i]:o[i + 1]]) for i, b in enumerate(self.blocks))

    def column_norms_l1(self) -> np.ndarray:
        return sum(b.column_norms_l1() for b in self.blocks)

    def column_norms_sq(self) -> np.ndarray:
        return sum(b.column_norms_sq() for b in self.blocks)

    def sensitivity(self, p: int) -> float:
        """Exact max column norm when n ≤ 2²⁶; otherwise the (upper-bound) sum of block sensitivities."""
        if self.shape[1] <= DENSE_LIMIT:
            return super().sensitivity(p)
        if p == 1:
            return sum(b.sensitivity(1) for b in self.blocks)
        return math.sqrt(sum(b.sensitivity(2) ** 2 for b in self.blocks))

    def frobenius_sq(self) -> float:
        return sum(b.frobenius_sq() for b in self.blocks)

    def gram(self) -> Matrix:
        return Sum([b.gram() for b in self.blocks])

    def dense(self) -> np.ndarray:
        return np.vstack([b.dense() for b in self.blocks])


class Sum(Matrix):
    """``A_1 + … + A_k`` (e.g. the Gram of a union)."""

    def __init__(self, terms: Sequence[Matrix]) -> None:
        self.terms = list(terms)
        self.shape = self.terms[0].shape

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return sum(t.matvec(x) for t in self.terms)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return sum(t.rmatvec(y) for t in self.terms)

    def column_norms_l1(self) -> np.ndarray:
        return np.abs(self.dense()).sum(axis=0)

    def column_norms_sq(self) -> np.ndarray:
        return (self.dense() ** 2).sum(axis=0)

    def dense(self) -> np.ndarray:
        return sum(t.dense() for t in self.terms)


def kron_terms(w: Matrix) -> list[tuple[float, list[np.ndarray]]]:
    """Flatten a workload built from VStack / Weighted / Kronecker / Explicit into ``(weight, factors)``."""
    if isinstance(w, VStack):
        return [t for b in w.blocks for t in kron_terms(b)]
    if isinstance(w, Weighted):
        return [(w.weight * c, f) for c, f in kron_terms(w.base)]
    if isinstance(w, Kronecker):
        return [(1.0, list(w.factors))]
    if isinstance(w, Explicit):
        return [(1.0, [w.a])]
    raise WorkloadError(f"{type(w).__name__} is not a union of Kronecker products")


def union_of_kron(terms: Sequence[tuple[float, Sequence[np.ndarray]]]) -> VStack:
    """Build ``[w_1 ⊗_i W_1i; …]`` from ``(weight, factors)`` pairs."""
    return VStack([Weighted(Kronecker(list(f)), c) for c, f in terms])
