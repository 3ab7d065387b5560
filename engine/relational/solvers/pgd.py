"""Projected gradient descent on the relaxed link problem of one slice (Algorithm 2).

Minimise f(B) = Σ_w ‖(Q_w vec(B) − t_w) / s‖² over the slice's relaxed block B, where Q_w vec(B) =
vec(A1_wᵀ B A2_w) is computed with one-hot sparse factors (never a dense Q_w), t_w are target counts
and s the normaliser (m_syn or m_slice). The feasible set is the box-plus-sum set (many-to-many) or
row simplices (one-to-many). Step η = 1/L with L = 2σ_max(Q)²/s² (Thm 3).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from privcube.core.errors import DataError
from privcube.relational.solvers.projection import BoxSumProjector, project_rows_simplex


def one_hot(cells: np.ndarray, size: int) -> sp.csr_matrix:
    """Sparse (n × size) one-hot matrix of cell indices."""
    n = cells.size
    return sp.csr_matrix((np.ones(n), (np.arange(n), cells)), shape=(n, size))


#: A workload whose smaller side has at most this many cells is applied with dense one-hot products (BLAS;
#: cost ∝ cells of that side), otherwise with the sparse factors (cost independent of the cells).
DENSE_MAX_CELLS = 4


def _dense_one_hot(cells: np.ndarray, size: int) -> np.ndarray:
    """Dense (n × size) float one-hot matrix of cell indices."""
    out = np.zeros((cells.size, size))
    out[np.arange(cells.size), cells] = 1.0
    return out


@dataclass
class SliceOperator:
    """The stacked linear map B ↦ [vec(A1_wᵀ B A2_w)]_w for one slice (rows × cols)."""

    rows: list[np.ndarray]  # per workload: cell index of each slice row
    cols: list[np.ndarray]  # per workload: cell index of each slice column
    sizes: list[tuple[int, int]]

    def __post_init__(self) -> None:
        """Build the sparse one-hot factors once."""
        if not (len(self.rows) == len(self.cols) == len(self.sizes)):
            raise DataError("SliceOperator: rows, cols and sizes must have one entry per workload")
        self._a1t = [one_hot(r, s[0]).T.tocsr() for r, s in zip(self.rows, self.sizes)]
        self._a2t = [one_hot(c, s[1]).T.tocsr() for c, s in zip(self.cols, self.sizes)]
        self._scratch: np.ndarray | None = None  # block-sized buffer reused by ``adjoint``
        self._onehots: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """Slice shape (n_rows, n_cols)."""
        return (self.rows[0].size, self.cols[0].size) if self.rows else (0, 0)

    def apply(self, B: np.ndarray) -> list[np.ndarray]:
        """Per workload, the flattened count table A1ᵀ B A2: dense one-hot products (BLAS), the block-sized
        product against the side with fewer cells first, so no block-sized temporary is made."""
        out = []
        for (a1, a2), a1t, a2t, (s1, s2) in zip(self._dense(), self._a1t, self._a2t, self.sizes):
            if min(s1, s2) > DENSE_MAX_CELLS:  # sparse: A1ᵀB (D1 × n2, B read in place), then its product with A2
                out.append(np.asarray((a2t @ (a1t @ B).T).T).ravel())
            elif s2 <= s1:
                out.append((a1.T @ (B @ a2)).ravel())  # n1 × D2 first
            else:
                out.append(((a1.T @ B) @ a2).ravel())  # D1 × n2 first
        return out

    def _dense(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Dense one-hot factors (A1: n1 × D1, A2: n2 × D2) of the workloads with a small side, built on first use."""
        if self._onehots is None:
            empty = np.zeros((0, 0))
            self._onehots = [(_dense_one_hot(r, s[0]), _dense_one_hot(c, s[1])) if min(s) <= DENSE_MAX_CELLS
                             else (empty, empty) for r, c, s in zip(self.rows, self.cols, self.sizes)]
        return self._onehots

    def adjoint(self, R: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """Σ_w gather R_w[c1(r), c2(s)]: the slice-shaped Qᵀ r (into ``out`` when given; one reused scratch block)."""
        G = np.zeros(self.shape) if out is None else out
        if out is not None:
            G.fill(0.0)
        scratch = self._scratch
        if scratch is None or scratch.shape != self.shape:
            scratch = self._scratch = np.empty(self.shape)
        for r, c1, c2, (s1, s2) in zip(R, self.rows, self.cols, self.sizes):
            # mode 'clip' (indices are in range): numpy buffers ``out`` under the default mode 'raise'
            np.take(np.take(r.reshape(s1, s2), c1, axis=0), c2, axis=1, out=scratch, mode="clip")
            G += scratch
        return G

    def sigma_bound(self) -> float:
        """σ_max(Q)² ≤ Σ_w max cnt1_w · max cnt2_w (exact for one workload)."""
        tot = 0.0
        for c1, c2, (s1, s2) in zip(self.rows, self.cols, self.sizes):
            tot += float(np.bincount(c1, minlength=s1).max()) * float(np.bincount(c2, minlength=s2).max())
        return tot

    def sigma2_power(self, rng: np.random.Generator, iters: int = 60, tol: float = 1e-4) -> float:
        """σ_max(Q)² by power iteration on QᵀQ (an estimate from below; callers add a margin)."""
        v = rng.random(self.shape) + 0.1
        v /= math.sqrt(float(np.vdot(v, v)))
        w = np.empty_like(v)
        est = 0.0
        for _ in range(iters):
            self.adjoint(self.apply(v), out=w)
            nrm = math.sqrt(float(np.vdot(w, w)))
            if nrm == 0.0:
                return 0.0
            np.divide(w, nrm, out=v)
            if abs(nrm - est) <= tol * nrm:
                est = nrm
                break
            est = nrm
        return est


def objective(op: SliceOperator, B: np.ndarray, targets: Sequence[np.ndarray], scale: float) -> float:
    """f(B) = Σ_w ‖(Q_w B − t_w)/scale‖²."""
    return float(sum(np.sum(((q - t) / scale) ** 2) for q, t in zip(op.apply(B), targets)))


def pgd(op: SliceOperator, targets: Sequence[np.ndarray], scale: float, B0: np.ndarray,
        project: Callable[[np.ndarray], np.ndarray], *, iters: int = 100, sigma2: float | None = None,
        rng: np.random.Generator | None = None, history: list[float] | None = None) -> np.ndarray:
    """Projected gradient descent from ``B0`` with η = scale²/(2σ²); returns the relaxed block."""
    if scale <= 0:
        raise DataError(f"pgd: scale must be positive, got {scale!r}")
    if sigma2 is None:
        bound = op.sigma_bound()
        est = op.sigma2_power(rng or np.random.default_rng(0))
        sigma2 = min(bound, 1.05 * est) if est > 0 else bound
    if sigma2 <= 0:
        return project(np.asarray(B0, dtype=float))
    eta = scale * scale / (2.0 * sigma2)
    B = np.array(project(np.asarray(B0, dtype=float)), dtype=float)
    G = np.empty_like(B)
    takes_out = bool(getattr(project, "takes_out", False))
    for _ in range(iters):
        res = [q - t for q, t in zip(op.apply(B), targets)]
        if history is not None:
            history.append(float(sum(np.sum((r / scale) ** 2) for r in res)))
        # G ← B − η·∇f(B), ∇f = (2/scale²)·Qᵀ(QB − t); block-sized work stays in the two buffers B and G
        op.adjoint(res, out=G)
        G *= -eta * 2.0 / (scale * scale)
        G += B
        if takes_out:
            project(G, out=B)
        else:
            B = np.asarray(project(G), dtype=float)
    if history is not None:
        history.append(objective(op, B, targets, scale))
    return B


def box_sum_projector(m: float, hi: np.ndarray | float = 1.0) -> Callable[..., np.ndarray]:
    """Projector onto {0 ≤ B ≤ hi, ΣB = m} (many-to-many); ``proj(B, out=X)`` writes into X with reused
    scratch buffers (no block-sized allocation per PGD step)."""
    return BoxSumProjector(m, 0.0, hi)


def row_simplex_projector(mask: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Projector onto row simplices (one-to-many: each child row sums to 1)."""
    return lambda B: project_rows_simplex(B, mask)


__all__ = ["SliceOperator", "one_hot", "objective", "pgd", "box_sum_projector", "row_simplex_projector"]
