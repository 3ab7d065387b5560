"""The relaxed link problem (eq. 6 of Alimohammadi et al.) over link counts between record types.

With L_ab = Σ_{i∈a, j∈b} B_ij (``record_types``), f(B) = Σ_w ‖(Q_w vec(B) − t_w)/s‖² = Σ_w ‖(C_w L − t_w)/s‖²,
and the constraints aggregate exactly: 0 ≤ B ≤ 1 gives 0 ≤ L_ab ≤ U_ab = n_a·n_b (minus the diagonal cells
i = j of self-referential links), ΣB = m gives ΣL = m, one parent per child gives Σ_b L_ab = n_a, kept row
degrees give Σ_b L_ab = Σ_{i∈a} deg_i, and a right cap d_max gives Σ_a L_ab ≤ n_b·d_max. Conversely a
feasible L is met by B uniform inside each block (B_ij = L_ab/U_ab): the optimum over L is the optimum over
B, with #types1 × #types2 variables instead of n1 × n2.

We optimise the block densities x = L / W (W_ab = n_a·n_b): that is the record-level problem restricted to
block-uniform B. The steps are the record-level ones: the gradient of f at every record pair of a block
(∂f/∂L_ab), the paper's step η = s²/(2σ²) with σ = ‖Q‖ (= σ_max of C·diag(√W)), and the projection in the
norm of B, Σ_ab W_ab (x_ab − z_ab)²; here with Nesterov acceleration and restarts, at the cost of the types.
(Steps in the plain Euclidean norm of x scale block ab's curvature by W_ab², so blocks of few records
barely move: after 100 steps at the paper's MovieLens size the objective was 0.093 against 0.059.)
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from privcube.core.errors import DataError


@dataclass(frozen=True)
class RowBox:
    """What a row projection needs of its weights W and bounds hi, computed once per feasible set: the live
    entries (W > 0 and hi > 0; None when all are), the slope weights, the row capacities Σ_b W_b hi_b and,
    when every bound is the same, that scalar (a scalar clip is the cheap one)."""

    W: np.ndarray
    hi: np.ndarray
    live: np.ndarray | None
    w2: np.ndarray
    cap: np.ndarray
    top: float | None

    @classmethod
    def of(cls, W: np.ndarray, hi: np.ndarray) -> "RowBox":
        """The box of weights ``W`` and upper bounds ``hi`` (same shape)."""
        W, hi = np.asarray(W, dtype=float), np.asarray(hi, dtype=float)
        live = (W > 0) & (hi > 0)
        every = bool(live.all())
        top = float(hi.flat[0]) if hi.size and bool(np.all(hi == hi.flat[0])) else None
        return cls(W, hi, None if every else live, W if every else np.where(live, W, 0.0), (W * hi).sum(axis=1), top)


def project_weighted_rows(Z: np.ndarray, W: np.ndarray, r: np.ndarray, hi: np.ndarray, *,
                          max_iter: int = 200, shifts: bool = False, y0: np.ndarray | None = None,
                          box: RowBox | None = None) -> Any:
    """Projection of every row z of ``Z`` onto {0 ≤ x ≤ hi, Σ_b W_b x_b = r_row} (W ≥ 0) in the record-level
    norm Σ_b W_b (x_b − z_b)² (entries with W = 0 are no records: they stay at clip(z, 0, hi)).

    KKT: x = clip(z + y, 0, hi) with one scalar y per row solving g(y) = Σ_b W_b clip(z_b + y, 0, hi_b) = r;
    g is piecewise linear and non-decreasing. Each row's root is found by Newton steps on the current
    free set (slope Σ_free W_b), safeguarded by bisection of a bracket that always holds the root: once a
    step lands on the right linear piece it is exact, so a row ends after a few passes over it (vectorised
    over the rows still open; no sort). A residual above 1e-12 of the row's total is spread over entries with
    room (the box is kept). ``shifts``: also return each row's multiplier y (the dual of its total); ``y0``: a
    start for the multipliers (e.g. the previous PGD step's), clipped into the bracket; only the work depends on it.
    ``box``: ``RowBox.of(W, hi)`` when the caller projects onto the same box many times (then W, hi unused).
    """
    Z = np.asarray(Z, dtype=float)
    box = box if box is not None else RowBox.of(W, hi)
    W, live, cap = box.W, box.live, box.cap
    r = np.asarray(r, dtype=float)
    if np.any(r < -1e-9 * np.maximum(1.0, cap)) or np.any(r > cap * (1 + 1e-12) + 1e-9):
        raise DataError("type projection: a row total lies outside [0, its capacity]")
    y_lo, y_hi = _row_brackets(Z, box)
    start = np.zeros(Z.shape[0]) if y0 is None else np.broadcast_to(np.asarray(y0, dtype=float), (Z.shape[0],))
    y = np.clip(start, y_lo, y_hi)  # warm start: z itself, or the caller's multipliers
    y = np.where(r <= 0, y_lo, np.where(r >= cap, y_hi, y))  # the ends: every live entry at 0, or at hi
    _row_roots(Z, box, r, y, y_lo, y_hi, max_iter)
    X = Z + y[:, None]
    if live is not None:
        X = np.where(W > 0, X, Z)  # entries with W = 0 are not shifted
    np.clip(X, 0.0, _upper(box), out=X)
    _spread_residuals(X, box, r)
    return (X, y) if shifts else X


def _upper(box: RowBox) -> Any:
    """The clip's upper bound: a scalar when every bound is the same (the cheap clip), else ``hi``."""
    return box.top if box.top is not None else box.hi


def _row_brackets(Z: np.ndarray, box: RowBox) -> tuple[np.ndarray, np.ndarray]:
    """Per row, [y_lo, y_hi] holding the root: below y_lo every live entry sits at 0 (g = 0 ≤ r), above y_hi
    at hi (g = cap ≥ r)."""
    hi, live = box.hi, box.live
    if live is None:
        y_lo = -Z.max(axis=1, initial=-np.inf)
        y_hi = (hi - Z).max(axis=1, initial=-np.inf) if box.top is None else box.top - Z.min(axis=1, initial=np.inf)
    else:
        y_lo = np.where(live, -Z, np.inf).min(axis=1, initial=np.inf)
        y_hi = np.where(live, hi - Z, -np.inf).max(axis=1, initial=-np.inf)
    y_lo = np.where(np.isfinite(y_lo), y_lo, 0.0)
    y_hi = np.where(np.isfinite(y_hi), np.maximum(y_hi, y_lo), y_lo)
    return y_lo, y_hi


def _row_roots(Z: np.ndarray, box: RowBox, r: np.ndarray, y: np.ndarray, y_lo: np.ndarray, y_hi: np.ndarray,
               max_iter: int) -> None:
    """Each open row's multiplier y solved in place: safeguarded Newton steps on the free set, the brackets
    narrowed as they go (vectorised over the rows still open)."""
    W, hi, w2, cap = box.W, box.hi, box.w2, box.cap
    bound = _upper(box)
    tol = 1e-13 * np.maximum(1.0, cap)
    open_ = np.flatnonzero((y_hi > y_lo) & (r > 0) & (r < cap))
    V_all, I_all = np.empty_like(Z), np.empty(Z.shape, dtype=bool)  # one pass's work arrays, reused
    for _ in range(max_iter):
        if open_.size == 0:
            break
        yo = y[open_]
        whole = 2 * open_.size >= Z.shape[0]  # most rows open: pass over all of them (views), no gathered copies
        if whole:
            Zo, Wo, w2o, ho, shift = Z, W, w2, bound, y
        else:
            Zo, Wo, w2o, shift = Z[open_], W[open_], w2[open_], yo
            ho = bound if box.top is not None else hi[open_]
        V, free = V_all[:Zo.shape[0]], I_all[:Zo.shape[0]]
        np.add(Zo, shift[:, None], out=V)
        np.less(V, ho, out=free)
        free &= V > 0.0  # the free set 0 < v < hi (entries with W = 0 have no slope: w2 is 0 there)
        slope = np.einsum("ij,ij->i", w2o, free)
        g = np.einsum("ij,ij->i", Wo, np.clip(V, 0.0, ho, out=V))
        if whole and open_.size < Z.shape[0]:
            slope, g = slope[open_], g[open_]
        diff = r[open_] - g
        lo, up = y_lo[open_], y_hi[open_]
        below = diff > 0
        lo = np.where(below, yo, lo)
        up = np.where(below, up, yo)
        y_lo[open_], y_hi[open_] = lo, up
        step = np.divide(diff, slope, out=np.zeros_like(diff), where=slope > 0)
        y_new = yo + step
        bad = ~((y_new > lo) & (y_new < up)) | (slope <= 0)
        y_new = np.where(bad, 0.5 * (lo + up), y_new)
        done = (np.abs(diff) <= tol[open_]) | (up - lo <= 1e-15 * np.maximum(1.0, np.maximum(np.abs(lo), np.abs(up))))
        y[open_] = np.where(done, yo, y_new)
        open_ = open_[~done]


def _spread_residuals(X: np.ndarray, box: RowBox, r: np.ndarray) -> None:
    """Rows off their total by more than float rounding of the sum (a Newton stop within ``tol`` of the
    capacity): the residual spread over entries with room, in place (the box is kept)."""
    W, hi, live = box.W, box.hi, box.live
    res = r - np.einsum("ij,ij->i", W, X)
    fix = np.flatnonzero(np.abs(res) > 1e-12 * np.maximum(1.0, np.abs(r)))
    if fix.size:
        Xf, Wf, rf = X[fix], W[fix], res[fix]
        room = np.where(rf[:, None] > 0, (box.top if box.top is not None else hi[fix]) - Xf, Xf)
        if live is not None:
            room = np.where(live[fix], room, 0.0)  # entries with W = 0 do not count in the total
        wroom = np.einsum("ij,ij->i", Wf, room)
        frac = np.where(wroom > 0, np.minimum(np.abs(rf) / np.where(wroom > 0, wroom, 1.0), 1.0), 0.0)
        X[fix] = Xf + room * (np.sign(rf) * frac)[:, None]


@dataclass
class TypeConstraints:
    """The aggregated feasible set, in densities x = L/W: 0 ≤ x ≤ hi, row totals of L = ``rows`` (or, when
    ``rows`` is None, the grand total ``total``), optional column caps Σ_a L_ab ≤ ``caps``_b and row caps
    Σ_b L_ab ≤ ``row_caps``_a (left degrees learned up to d_max); ``dykstra``: most rounds of a capped
    projection, in the record-level norm Σ_ab W_ab (x_ab − z_ab)² (the Euclidean norm of the block-uniform B,
    so a multiplier shifts every density of its row or column alike: x = clip(z + y_a − ν_a − μ_b, 0, hi)).
    One object serves one solve: it keeps the last projection's multipliers as the next start."""

    W: np.ndarray
    hi: np.ndarray
    rows: np.ndarray | None
    total: float
    caps: np.ndarray | None = None
    dykstra: int = 10
    row_caps: np.ndarray | None = None

    def __post_init__(self) -> None:
        self._warm: dict[str, Any] = {}  # the last projection's multipliers (a warm start, never a result)
        self._box: RowBox | None = None  # W and hi as the row projection needs them, once per solve

    def _rows(self, Z: np.ndarray, y0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Onto the row totals (or the grand total): the projection and its multipliers (per row, or one),
        Newton started from ``y0``."""
        shape = Z.shape if self.rows is not None else (1, -1)
        if self._box is None:
            self._box = RowBox.of(self.W.reshape(shape), self.hi.reshape(shape))
        r = self.rows if self.rows is not None else np.array([self.total])
        X, y = project_weighted_rows(Z.reshape(shape), self.W, r, self.hi, shifts=True, y0=y0, box=self._box)
        return X.reshape(Z.shape), y

    def _kkt_gap(self, X: np.ndarray, mu: np.ndarray | None, nu: np.ndarray | None) -> float:
        """How far a row-feasible iterate x = clip(z + W∘(y − ν − μ)) is from the projection, relative to the
        largest cap: its largest cap excess, and the largest slack of a cap whose multiplier is positive
        (both 0 at the KKT point; the other conditions hold by construction)."""
        worst = 0.0
        for cap, axis, mult in ((self.caps, 0, mu), (self.row_caps, 1, nu)):
            if cap is not None and mult is not None:
                tot = (self.W * X).sum(axis=axis)
                scale = max(1.0, float(cap.max()))
                worst = max(worst, float(np.max(tot - cap, initial=0.0)) / scale,
                            float(np.max(np.where(mult > 0, cap - tot, 0.0), initial=0.0)) / scale)
        return worst

    def project(self, Z: np.ndarray) -> np.ndarray:
        """The projection. With caps: block coordinate ascent on the dual (Dykstra's alternating projections
        written in their multipliers: x = clip(z + W∘(y_a − ν_a − μ_b), 0, hi), y for the row totals or the
        grand total, μ ≥ 0 for the column caps, ν ≥ 0 for the row caps), each block solved exactly in turn,
        started from the previous call's multipliers: consecutive PGD steps project nearby points, so a few
        rounds suffice where a cold start needed all of them. The result always meets the row totals / grand
        total exactly, the caps up to the last round (``dykstra`` rounds at most)."""
        y0 = self._warm.get("y")
        if self.caps is None and self.row_caps is None:
            X, self._warm["y"] = self._rows(Z, y0)
            return X
        Z = np.asarray(Z, dtype=float)
        W = self.W
        A, B = Z.shape
        y = np.zeros(A if self.rows is not None else 1) if y0 is None else y0
        mu = self._warm.get("mu", np.zeros(B)) if self.caps is not None else None
        nu = self._warm.get("nu", np.zeros(A)) if self.row_caps is not None else None

        def col_shift() -> Any:  # the column caps' shift, broadcast over rows (0 without them)
            return mu[None, :] if mu is not None else 0.0

        def row_shift() -> Any:  # the row caps' shift, broadcast over columns (0 without them)
            return nu[:, None] if nu is not None else 0.0

        X = Z
        for _ in range(max(1, self.dykstra)):
            yl = y[:, None] if self.rows is not None else y[0]
            if mu is not None:  # column caps, given y and ν
                mu = _cap_multipliers((Z + (yl - row_shift())).T, W.T, self.caps, self.hi.T, mu)
            if nu is not None:  # row caps, given y and μ
                nu = _cap_multipliers(Z + (yl - col_shift()), W, self.row_caps, self.hi, nu)
            X, y = self._rows(Z - (col_shift() + row_shift()), y)
            if self._kkt_gap(X, mu, nu) <= 1e-9:
                break  # caps met, and every cap with a positive multiplier is tight: the projection
        self._warm.update({k: v for k, v in (("y", y), ("mu", mu), ("nu", nu)) if v is not None})
        return X


def _cap_multipliers(Z: np.ndarray, W: np.ndarray, cap: np.ndarray, hi: np.ndarray,
                     start: np.ndarray | None = None) -> np.ndarray:
    """Per row of Z, the multiplier μ ≥ 0 of {0 ≤ x ≤ hi, Σ_b W_b x_b ≤ cap_row} in the record-level norm:
    x = clip(z − μ, 0, hi); rows under their cap once clipped have μ = 0; Newton starts from ``start``."""
    mu = np.zeros(Z.shape[0])
    over = np.flatnonzero((W * np.clip(Z, 0.0, hi)).sum(axis=1) > cap)
    if over.size:
        _, y = project_weighted_rows(Z[over], W[over], cap[over], hi[over], shifts=True,
                                     y0=None if start is None else -start[over])
        mu[over] = np.maximum(-y, 0.0)
    return mu


def _one_hot(b: np.ndarray, s2: int, dense_cells: int = 1 << 18) -> Any:
    """The B × s2 matrix with a 1 at (j, b_j): dense up to ``dense_cells`` entries, sparse beyond."""
    if b.size * s2 <= dense_cells:
        out = np.zeros((b.size, s2))
        out[np.arange(b.size), b] = 1.0
        return out
    return sparse.csc_array((np.ones(b.size), (np.arange(b.size), b)), shape=(b.size, s2))


@dataclass
class TypeOperator:
    """x ↦ [C_w (W∘x)]_w, and C's adjoint on count tables, without a dense Q_w.

    C_w L = S1_w L S2_wᵀ (one-hot aggregation of left types, then right types). Workloads with the same
    left cells share the row aggregation, so a product costs one pass over the A × B type pairs per distinct
    left attribute set (a few for cross k-way workloads), not one per workload.
    """

    left: list[np.ndarray]  # per workload: the left cell of each left type (A,)
    right: list[np.ndarray]  # per workload: the right cell of each right type (B,)
    shapes: list[tuple[int, int]]  # per workload: (left cells, right cells)
    W: np.ndarray

    def __post_init__(self) -> None:
        groups: dict[tuple[bytes, int], list[int]] = {}  # workloads by their left cells
        for k, (a, (s1, _)) in enumerate(zip(self.left, self.shapes)):
            groups.setdefault((np.ascontiguousarray(a).tobytes(), s1), []).append(k)
        self._groups = []
        for idx in groups.values():
            a, s1 = self.left[idx[0]], self.shapes[idx[0]][0]
            s1_onehot = _one_hot(a, s1, dense_cells=0).T  # sparse s1 × A
            self._groups.append((a, s1, s1_onehot, idx))
        # S_2 per workload (B × s2 one-hot): the right aggregation as one product, dense (BLAS) while small
        self._s2 = [_one_hot(b, s2) for b, (_, s2) in zip(self.right, self.shapes)]

    @property
    def sizes(self) -> list[int]:
        """Cells per workload."""
        return [s1 * s2 for s1, s2 in self.shapes]

    def apply(self, x: np.ndarray) -> list[np.ndarray]:
        """Per workload, the count table of L = W∘x (left cell major, flattened)."""
        return self.apply_counts(self.W * x)

    def apply_counts(self, L: np.ndarray) -> list[np.ndarray]:
        """Per workload, the count table of the type-pair link counts ``L``."""
        out: list[np.ndarray] = [np.empty(0)] * len(self.left)
        for _, _, s1_onehot, idx in self._groups:
            M = s1_onehot @ L  # rows summed per left cell (s1 × B)
            for k in idx:
                out[k] = np.asarray(M @ self._s2[k]).ravel()
        return out

    def adjoint_counts(self, R: Sequence[np.ndarray]) -> np.ndarray:
        """Σ_w R_w[cell(a, b)] (the adjoint of ``apply_counts``), gathered once per left attribute set."""
        G = np.zeros(self.W.shape)
        for a, s1, _, idx in self._groups:
            acc = np.zeros((s1, self.W.shape[1]))
            for k in idx:
                acc += np.asarray(R[k]).reshape(s1, self.shapes[k][1])[:, self.right[k]]
            G += acc[a]
        return G

    def sigma2(self, rng: np.random.Generator, iters: int = 100, tol: float = 1e-6) -> float:
        """σ_max² of u ↦ C(√W∘u), i.e. ‖Q‖² of the record-level operator, by power iteration (an estimate
        from below; callers add a margin)."""
        s = np.sqrt(self.W)
        v = rng.random(self.W.shape) + 0.1
        v /= np.linalg.norm(v)
        est = 0.0
        for _ in range(iters):
            w = s * self.adjoint_counts(self.apply_counts(s * v))
            nrm = float(np.linalg.norm(w))
            if nrm == 0.0:
                return 0.0
            v = w / nrm
            if abs(nrm - est) <= tol * nrm:
                return nrm
            est = nrm
        return est


def type_operator(c1: Sequence[np.ndarray], c2: Sequence[np.ndarray], sizes: Sequence[tuple[int, int]],
                  W: np.ndarray) -> TypeOperator:
    """The operator of the workloads with per-type cells ``c1`` (left) and ``c2`` (right)."""
    return TypeOperator([np.asarray(a, dtype=np.int64) for a in c1], [np.asarray(b, dtype=np.int64) for b in c2],
                        [(int(s1), int(s2)) for s1, s2 in sizes], W)


def objective(op: TypeOperator, x: np.ndarray, targets: Sequence[np.ndarray], scale: float) -> float:
    """f(x) = Σ_w ‖(C_w(W∘x) − t_w)/scale‖²."""
    return float(sum(np.sum(((q - t) / scale) ** 2) for q, t in zip(op.apply(x), targets)))


def solve_types(op: TypeOperator, targets: Sequence[np.ndarray], scale: float, cons: TypeConstraints,
                x0: np.ndarray, *, iters: int = 500, rng: np.random.Generator | None = None,
                history: list[float] | None = None, tol: float = 1e-7) -> np.ndarray:
    """Accelerated projected gradient (FISTA with gradient restarts) from ``x0`` in the record-level norm:
    step 1/L with L = 2σ²/scale², σ = ‖Q‖ (the paper's η = scale²/(2σ²)); stops early when a step moves x by
    less than ``tol`` relative. Returns the relaxed densities (feasible)."""
    if scale <= 0:
        raise DataError(f"type problem: scale must be positive, got {scale!r}")
    sigma2 = 1.05 * op.sigma2(rng or np.random.default_rng(0))  # ‖Q‖² at record level
    x = cons.project(np.asarray(x0, dtype=float))
    if sigma2 <= 0 or iters <= 0:
        return x
    eta = scale * scale / (2.0 * sigma2)
    y, t = x.copy(), 1.0
    for _ in range(iters):
        res = [q - tw for q, tw in zip(op.apply(y), targets)]
        if history is not None:
            history.append(objective(op, x, targets, scale))
        g = op.adjoint_counts(res) * (2.0 / (scale * scale))  # ∂f/∂L = ∂f/∂B_ij for every (i, j) of a block
        grad = g * op.W  # ∂f/∂x (the restart test's directional derivative)
        x_new = cons.project(y - eta * g)  # the record-level step on every B_ij of a block
        if float(np.vdot(grad, x_new - x)) > 0:  # restart: momentum points uphill
            t = 1.0
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        y = x_new + ((t - 1.0) / t_new) * (x_new - x)
        moved = float(np.linalg.norm(x_new - x))
        x, t = x_new, t_new
        if moved <= tol * max(float(np.linalg.norm(x)), 1e-300):
            break
    if history is not None:
        history.append(objective(op, x, targets, scale))
    return x


__all__ = ["RowBox", "project_weighted_rows", "TypeConstraints", "TypeOperator", "type_operator", "objective", "solve_types"]
