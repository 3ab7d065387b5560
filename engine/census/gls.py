"""Exact hierarchical generalised least squares for one residual clique τ over the geography tree, in two
passes linear in the number of units (Hay, Rastogi, Miklau & Suciu 2010, "Boosting the accuracy of
differentially private histograms through consistency", generalised to per-level variances, unmeasured nodes,
several measurements of one node, exact (variance 0) nodes and levels with no measurement).

Why scalar weights are exact: every measurement of a node is truth + noise with covariance v·K (the same
kernel K for every node), so the stacked covariance is D ⊗ K (D diagonal of the scalar variances) and the design
is A ⊗ I; hence (A'D⁻¹A ⊗ K⁻¹)⁻¹ (A'D⁻¹ ⊗ K⁻¹) = (A'D⁻¹A)⁻¹A'D⁻¹ ⊗ I: the GLS is the scalar-weighted one,
cell by cell, and its covariance is (A'D⁻¹A)⁻¹ ⊗ K (K⁺ and the range of K in place of K⁻¹ when K is singular).

The passes. Bottom-up: a node's own measurements are combined by inverse variance, then with the sum of its
children's bottom-up estimates (variance: the sum of theirs). Top-down: the root's estimate is final; a child
gets its bottom-up estimate b plus the share v/V (its bottom-up variance over the sum over its siblings) of
its parent's difference (final − Σ b); its posterior variance is v(1 − v/V) + (v/V)²·P (P the parent's).
Exact nodes (v = 0) take no share and stay exact. A node with no information anywhere below has v = ∞: it
takes the whole difference (several such siblings: equal shares, variance ∞ — undetermined). A level above
all measurements is the sum of its children; levels below the finest measured level are not returned.
Post-processing of released noisy answers: spends no privacy budget.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from privcube.core.errors import ConfigError

from .hierarchy import ROOT, Hierarchy

#: exact values (invariants) that differ by more than this relative amount contradict each other
EXACT_TOLERANCE = 1e-9


def hierarchical_gls(hierarchy: Hierarchy, measured: Mapping[str, Sequence[tuple[np.ndarray, float]]]
                     ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """measured[level] = list of (z of shape (n_units(level), *cells), variance >= 0; 0 = exact). The variance
    may also be an array (n_units,) (``inf`` = that unit not measured); a row of z holding NaN is not measured.
    The root may be measured under the key ``""``. Returns (estimate, variance): estimate[level] for the root
    ``""`` (n_units 1) and every level from levels[0] down to the finest measured one, children summing to
    their parent to float rounding; variance[level] the per-unit posterior variance (n_units,) (times K_τ)."""
    chain = _chain(hierarchy, measured)
    cells = _cell_shape(measured)
    bu_est: dict[str, np.ndarray] = {}
    bu_var: dict[str, np.ndarray] = {}
    sums: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for depth in range(len(chain) - 1, -1, -1):
        level = chain[depth]
        own_e, own_v = _own(hierarchy, level, measured.get(level, ()), cells)
        if depth == len(chain) - 1:
            bu_est[level], bu_var[level] = own_e, own_v
            continue
        child = chain[depth + 1]
        starts = hierarchy.segment_starts(child)
        s_e = np.add.reduceat(bu_est[child], starts, axis=0)
        s_v = np.add.reduceat(bu_var[child], starts)
        sums[child] = (s_e, s_v)
        _check_exact_agree(own_e, own_v, s_e, s_v, level)
        bu_est[level], bu_var[level] = _combine(own_e, own_v, s_e, s_v)
    est = {ROOT: bu_est[ROOT]}
    var = {ROOT: bu_var[ROOT]}
    for depth in range(1, len(chain)):
        level, up = chain[depth], chain[depth - 1]
        est[level], var[level] = _top_down(hierarchy, level, bu_est[level], bu_var[level], sums[level],
                                           est[up], var[up])
    return est, var


def _chain(hierarchy: Hierarchy, measured: Mapping[str, Sequence]) -> list[str]:
    known = [ROOT, *hierarchy.levels]
    for level in measured:
        if level not in known:
            raise ConfigError(f"census GLS: measured level {level!r} is not a geography level {list(hierarchy.levels)}")
    deepest = max((known.index(lv) for lv, items in measured.items() if len(items)), default=None)
    if deepest is None:
        raise ConfigError("census GLS: no measurement at any level; nothing to estimate")
    return known[: deepest + 1]


def _cell_shape(measured: Mapping[str, Sequence[tuple[np.ndarray, float]]]) -> tuple[int, ...]:
    shapes = {np.shape(z)[1:] for items in measured.values() for z, _ in items}
    if len(shapes) != 1:
        raise ConfigError(f"census GLS: measurements of one clique have different cell shapes {sorted(shapes)}")
    return shapes.pop()


def _col(v: np.ndarray, ndim: int) -> np.ndarray:
    """A per-unit vector shaped to broadcast against (n, *cells)."""
    return v.reshape(v.shape + (1,) * (ndim - 1))


def _own(hierarchy: Hierarchy, level: str, items: Sequence[tuple[np.ndarray, float]], cells: tuple[int, ...]
         ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance combination of a level's own measurements, unit by unit (exact ones win)."""
    n = hierarchy.n_units(level)
    prec = np.zeros(n)
    wsum = np.zeros((n, *cells))
    n_exact = np.zeros(n)
    exact_sum = np.zeros((n, *cells))
    parsed = []
    for z, v in items:
        z = np.asarray(z, dtype=np.float64)
        if z.shape != (n, *cells):
            raise ConfigError(f"census GLS: a measurement of level {level!r} has shape {z.shape}, "
                              f"expected {(n, *cells)}")
        v = np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
        if np.any(np.isnan(v)) or np.any(v < 0):
            raise ConfigError(f"census GLS: a measurement of level {level!r} has a negative or NaN variance")
        ok = np.isfinite(v) & np.all(np.isfinite(z.reshape(n, -1)), axis=1)
        z = np.where(_col(ok, z.ndim), z, 0.0)
        exact = ok & (v == 0)
        w = np.where(ok & (v > 0), 1.0 / np.where(v > 0, v, 1.0), 0.0)
        n_exact += exact
        exact_sum += z * _col(exact, z.ndim)
        prec += w
        wsum += z * _col(w, z.ndim)
        parsed.append((z, exact))
    has_exact = n_exact > 0
    nd = len(cells) + 1
    est = np.where(_col(has_exact, nd), exact_sum / _col(np.maximum(n_exact, 1), nd),
                   wsum / _col(np.where(prec > 0, prec, 1.0), nd))
    var = np.where(has_exact, 0.0, np.where(prec > 0, 1.0 / np.where(prec > 0, prec, 1.0), np.inf))
    for z, exact in parsed:
        _check_exact_agree(z, np.where(exact, 0.0, np.inf), est, var, level)
    return est, var


def _check_exact_agree(e1: np.ndarray, v1: np.ndarray, e2: np.ndarray, v2: np.ndarray, level: str) -> None:
    both = (v1 == 0) & (v2 == 0)
    if not np.any(both):
        return
    a, b = e1[both], e2[both]
    bad = np.abs(a - b) > EXACT_TOLERANCE * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
    if np.any(bad):
        units = int(np.count_nonzero(np.any(bad.reshape(len(bad), -1), axis=1)))
        raise ConfigError(f"census: exact values (invariants) contradict each other at level {level or 'root'!r}: "
                          f"{units} unit(s) whose exact value differs from another exact value or the exact sum "
                          f"of its children")


def _combine(e1: np.ndarray, v1: np.ndarray, e2: np.ndarray, v2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance combination of two independent estimates (0 = exact, inf = no information)."""
    p1 = np.where(np.isinf(v1), 0.0, 1.0 / np.where(v1 > 0, v1, 1.0))
    p2 = np.where(np.isinf(v2), 0.0, 1.0 / np.where(v2 > 0, v2, 1.0))
    p = p1 + p2
    alpha = np.where(v1 == 0, 1.0, np.where(v2 == 0, 0.0, p1 / np.where(p > 0, p, 1.0)))
    var = np.where((v1 == 0) | (v2 == 0), 0.0, np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), np.inf))
    a = _col(alpha, e1.ndim)
    return a * e1 + (1.0 - a) * e2, var


def _top_down(hierarchy: Hierarchy, level: str, b: np.ndarray, v: np.ndarray,
              sums: tuple[np.ndarray, np.ndarray], parent_est: np.ndarray, parent_var: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each child: its bottom-up estimate plus its variance share of the parent's difference."""
    s_e, _ = sums
    p = hierarchy.parent_of(level)
    starts = hierarchy.segment_starts(level)
    inf = np.isinf(v)
    k_inf = np.add.reduceat(inf.astype(np.float64), starts)
    v_fin = np.where(inf, 0.0, v)
    V = np.add.reduceat(v_fin, starts)
    kp, Vp, Pp = k_inf[p], V[p], parent_var[p]
    share = np.where(kp > 0, np.where(inf, 1.0 / np.maximum(kp, 1.0), 0.0),
                     np.where(Vp > 0, v_fin / np.where(Vp > 0, Vp, 1.0), 0.0))
    est = b + _col(share, b.ndim) * (parent_est - s_e)[p]
    with np.errstate(invalid="ignore"):
        spread = np.where(share > 0, share * share * Pp, 0.0)
        fin_var = v_fin * (1.0 - share) + spread
        inf_var = np.where(kp == 1, Vp + Pp, np.inf)
    return est, np.where(inf, inf_var, np.where(kp > 0, v_fin, fin_var))
