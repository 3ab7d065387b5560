"""Hierarchical GLS equals a dense brute-force GLS with the tree constraints (issue 35)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import null_space

from privcube.census.gls import hierarchical_gls
from privcube.census.hierarchy import Hierarchy
from privcube.core.errors import ConfigError

LEVELS = ("l0", "l1", "l2", "l3", "l4")


def _tree(rng: np.random.Generator, n_leaf: int = 40) -> Hierarchy:
    cols = {"l4": np.arange(n_leaf) * 3 + 1}
    cols["l3"] = rng.integers(0, 18, n_leaf)
    cols["l2"] = cols["l3"] // 3 + 100
    cols["l1"] = cols["l2"] // 2
    cols["l0"] = cols["l1"] // 2
    return Hierarchy.from_columns(cols, LEVELS)


def _members(h: Hierarchy, level: str, deepest: str) -> np.ndarray:
    """(n_units(level), n_units(deepest)) 0/1: which deepest units lie under each unit."""
    n = h.n_units(deepest)
    anc = h.ancestor(deepest, np.arange(n), level) if level else np.zeros(n, dtype=np.int64)
    return (anc[None, :] == np.arange(h.n_units(level))[:, None]).astype(float)


def _brute(h, measured, deepest):
    """Dense constrained WLS on the deepest measured level's units, cell by cell (identity kernel)."""
    rows, zs, vs = [], [], []
    for level, items in measured.items():
        M = _members(h, level, deepest)
        for z, v in items:
            v = np.broadcast_to(np.asarray(v, float), (len(z),))
            ok = np.isfinite(v)
            rows.append(M[ok]); zs.append(np.asarray(z)[ok]); vs.append(v[ok])
    A, Z, V = np.vstack(rows), np.concatenate(zs), np.concatenate(vs)
    ex = V == 0
    C, d = A[ex], Z[ex]
    x0 = np.linalg.lstsq(C, d, rcond=None)[0] if ex.any() else np.zeros((A.shape[1], Z.shape[1]))
    N = null_space(C) if ex.any() else np.eye(A.shape[1])
    An, w = A[~ex] @ N, 1.0 / V[~ex]
    H = An.T @ (An * w[:, None])
    if np.linalg.matrix_rank(H) < H.shape[0]:
        return None
    y = np.linalg.solve(H, An.T @ ((Z[~ex] - A[~ex] @ x0) * w[:, None]))
    x = x0 + N @ y
    cov = N @ np.linalg.inv(H) @ N.T
    return x, cov


def _random_measurements(rng, h):
    cells = (3,)
    truth = {"l3": rng.poisson(20, (h.n_units("l3"), *cells)).astype(float)}
    for up, lv in (("l2", "l3"), ("l1", "l2"), ("l0", "l1"), ("", "l0")):
        truth[up] = np.add.reduceat(truth[lv], h.segment_starts(lv), axis=0)
    measured = {}
    coarse = [lv for lv in ("", "l0", "l1") if rng.random() < 0.5]        # levels above may go unmeasured
    for level in (*coarse, "l2", "l3"):
        n = h.n_units(level)
        items = []
        for _ in range(1 if level != "l3" else 2):
            v = np.full(n, rng.uniform(0.5, 9.0))
            if level in ("l2", "l3") and rng.random() < 0.7:
                v[rng.random(n) < 0.3] = np.inf                         # some units not measured
            sd = np.sqrt(np.where(np.isinf(v), 1, v))[:, None]
            items.append((truth[level] + rng.normal(size=truth[level].shape) * sd, v))
        measured[level] = items
    if rng.random() < 0.5:   # an exact level: each l0 unit's totals are invariants
        measured.setdefault("l0", []).append((truth["l0"], 0.0))
    return measured, truth


def test_equals_dense_brute_force_gls_on_random_trees() -> None:
    rng = np.random.default_rng(7)
    compared = 0
    for _ in range(30):
        h = _tree(rng)
        measured, truth = _random_measurements(rng, h)
        est, var = hierarchical_gls(h, measured)
        assert set(est) == {"", "l0", "l1", "l2", "l3"}          # l4: below every measurement, not returned
        for up, lv in (("", "l0"), ("l0", "l1"), ("l1", "l2"), ("l2", "l3")):
            kids = np.add.reduceat(est[lv], h.segment_starts(lv), axis=0)
            assert np.allclose(kids, est[up], rtol=1e-9, atol=1e-9)
        brute = _brute(h, measured, "l3")
        if brute is None:
            continue
        compared += 1
        x, cov = brute
        for level in ("", "l0", "l1", "l2", "l3"):
            M = _members(h, level, "l3")
            assert np.allclose(est[level], M @ x, rtol=1e-9, atol=1e-9)
            assert np.allclose(var[level], np.einsum("ij,jk,ik->i", M, cov, M), rtol=1e-9, atol=1e-9)
        if any(np.all(v == 0) for _, v in measured.get("l0", [])):
            assert np.allclose(est["l0"], truth["l0"], atol=1e-9) and np.all(var["l0"] == 0)
    assert compared >= 20


def test_variance_matches_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    h = _tree(rng, 12)
    truth = np.zeros((h.n_units("l3"), 1))
    runs = []
    for _ in range(3000):
        measured = {"l0": [(np.add.reduceat(np.add.reduceat(np.add.reduceat(truth, h.segment_starts("l3")),
                                                            h.segment_starts("l2")), h.segment_starts("l1"))
                            + rng.normal(size=(h.n_units("l0"), 1)) * 2.0, 4.0)],
                    "l3": [(truth + rng.normal(size=truth.shape), 1.0)]}
        est, var = hierarchical_gls(h, measured)
        runs.append(est["l2"][:, 0])
    emp = np.var(np.array(runs), axis=0)
    assert np.allclose(emp, var["l2"], rtol=0.12)


def test_unmeasured_sibling_takes_the_difference_and_exact_values_stay() -> None:
    h = Hierarchy.from_columns({"s": np.array([1, 1, 1]), "c": np.array([1, 2, 3])}, ["s", "c"])
    est, var = hierarchical_gls(h, {"s": [(np.array([10.0]), 0.0)],
                                    "c": [(np.array([2.0, 3.0, 0.0]), np.array([1.0, 1.0, np.inf]))]})
    assert np.allclose(est["c"], [2.0, 3.0, 5.0]) and np.allclose(var["c"], [1.0, 1.0, 2.0])
    assert est[""][0] == 10.0 and var[""][0] == 0.0


def test_contradicting_invariants_are_refused() -> None:
    h = Hierarchy.from_columns({"s": np.array([1, 1]), "c": np.array([1, 2])}, ["s", "c"])
    with pytest.raises(ConfigError, match="contradict"):
        hierarchical_gls(h, {"s": [(np.array([10.0]), 0.0)], "c": [(np.array([2.0, 3.0]), 0.0)]})
    with pytest.raises(ConfigError, match="no measurement"):
        hierarchical_gls(h, {})
