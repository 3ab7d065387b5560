"""Small generated census hierarchies for the census estimation tests (issue 35): a tree, a person table per
finest unit, residual measurements per level, and the consistency checks every output must pass."""
from __future__ import annotations

import itertools

import numpy as np

from privcube.census.hierarchy import Hierarchy

LEVELS = ("state", "county", "tract")


def tree(rng: np.random.Generator, n_states: int = 4, n_counties: int = 20, n_tracts: int = 200) -> Hierarchy:
    """A random 3-level tree (every state has a county, every county a tract), codes shuffled."""
    county_state = np.concatenate([np.arange(n_states), rng.integers(0, n_states, n_counties - n_states)])
    tract_county = np.concatenate([np.arange(n_counties), rng.integers(0, n_counties, n_tracts - n_counties)])
    perm = rng.permutation(n_tracts)
    cols = {"tract": perm * 7 + 1000, "county": tract_county[perm] * 3 + 100,
            "state": county_state[tract_county[perm]] + 1}
    return Hierarchy.from_columns(cols, LEVELS)


def joint_truth(rng: np.random.Generator, h: Hierarchy, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Per level ("" = root), the full joint count array (n_units, *sizes) of a random Poisson person table whose
    distribution varies by unit."""
    attrs = sorted(sizes)
    shape = tuple(sizes[a] for a in attrs)
    n = h.n_units(LEVELS[-1])
    base = rng.dirichlet(np.ones(int(np.prod(shape))), size=n).reshape(n, *shape)
    pop = rng.lognormal(3.5, 1.0, n)
    out = {LEVELS[-1]: rng.poisson(base * pop.reshape(-1, *([1] * len(shape)))).astype(float)}
    for lv, up in (("tract", "county"), ("county", "state"), ("state", "")):
        out[up] = np.add.reduceat(out[lv], h.segment_starts(lv), axis=0)
    return out


def margin(joint: np.ndarray, attrs: list[str], s: tuple[str, ...]) -> np.ndarray:
    """The marginal table of attribute set s from a joint array (unit axis first)."""
    return joint.sum(axis=tuple(1 + i for i, a in enumerate(attrs) if a not in s))


def _centre(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    for ax in axes:
        x = x - x.mean(axis=ax, keepdims=True)
    return x


def residual(table: np.ndarray, tau: tuple[str, ...]) -> np.ndarray:
    """The residual of a τ-marginal table: centred along every attribute axis (kernel ⊗ (I − 11'/k))."""
    return _centre(table, tuple(range(1, 1 + len(tau))))


def reconstruct(res: dict[tuple[str, ...], np.ndarray], s: tuple[str, ...], sizes: dict[str, int]) -> np.ndarray:
    """The marginal table of s from the residuals of every τ ⊆ s (sum of broadcast residuals / sizes left out)."""
    n = next(iter(res.values())).shape[0]
    out = np.zeros((n, *[sizes[a] for a in s]))
    for k in range(len(s) + 1):
        for tau in itertools.combinations(s, k):
            r = res[tau]
            shape = [n] + [sizes[a] if a in tau else 1 for a in s]
            out = out + r.reshape(shape) / np.prod([sizes[a] for a in s if a not in tau])
    return out


def all_subsets(sets: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Every τ ⊆ some set of ``sets`` (sorted tuples)."""
    subsets = {t for s in sets for k in range(len(s) + 1) for t in itertools.combinations(s, k)}
    return sorted(subsets, key=lambda t: (len(t), t))


def check_consistent(h: Hierarchy, out: dict, *, integer: bool, zeros: dict | None = None,
                     fixed: dict | None = None, rtol: float = 1e-9) -> None:
    """Every property issue 35 asks of a published release, asserted directly on the arrays."""
    chain = ["", *[lv for lv in h.levels if lv in out]]
    for depth, level in enumerate(chain):
        for s, t in out[level].items():
            if integer:
                assert t.dtype == np.int64
            assert t.min(initial=0) >= 0, (level, s)
            if zeros and s in zeros:
                assert np.all(t[:, zeros[s]] == 0), (level, s)
            if len(s) >= 1 and () in out[level]:
                within = t.sum(axis=tuple(range(1, t.ndim)))
                _close(within, out[level][()], integer, rtol, (level, s, "unit total"))
            if len(s) == 2 and (s[0],) in out[level]:
                _close(t.sum(axis=2), out[level][(s[0],)], integer, rtol, (level, s, "a-margin"))
            if depth > 0 and s in out[chain[depth - 1]]:
                kids = np.add.reduceat(t, h.segment_starts(level), axis=0)
                _close(kids, out[chain[depth - 1]][s], integer, rtol, (level, s, "children sum"))
        if fixed and level in fixed:
            _close(out[level][()], fixed[level], integer, rtol, (level, "invariant"))


def _close(a: np.ndarray, b: np.ndarray, integer: bool, rtol: float, what) -> None:
    if integer:
        assert np.array_equal(a, b), what
    else:
        assert np.all(np.abs(a - b) <= rtol * np.maximum(1.0, np.abs(b))), what


#: the end-to-end workload: 1-way tables by tract, two 2-way by county, every 2-way by state
SIZES = {"a": 2, "b": 4, "c": 6}
WORKLOAD = {"tract": [("a",), ("b",), ("c",)], "county": [("a", "b"), ("b", "c")],
            "state": [("a", "b"), ("a", "c"), ("b", "c")]}
#: noise variance per level (budget split 0.2 / 0.3 / 0.5 of one ρ: variance ∝ 1 / share)
VARIANCE = {"state": 5.0, "county": 10.0 / 3.0, "tract": 2.0}
#: a = 0 with c in {0, 1} is impossible
ZEROS = {("a", "c"): np.array([[True, True, False, False, False, False], [False] * 6])}


def published_sets(level: str) -> list[tuple[str, ...]]:
    """The tables a level carries: its workload, the finer levels' (its children need them), their sub-margins."""
    finer = LEVELS[LEVELS.index(level):] if level else LEVELS
    return all_subsets([s for lv in finer for s in WORKLOAD[lv]])


def simulate(seed: int):
    """(hierarchy, truth tables, GLS tables, each-level-alone tables) with the state totals exact."""
    from privcube.census.gls import hierarchical_gls

    rng = np.random.default_rng(seed)
    h = tree(rng)
    joint = joint_truth(rng, h, SIZES)
    attrs = sorted(SIZES)
    for lv in joint:
        joint[lv][:, 0, :, 0:2] = 0.0           # the structural zero (a = 0, c in {0, 1}) in the truth
    measured_taus = {lv: all_subsets(WORKLOAD[lv]) for lv in LEVELS}
    raw: dict[str, dict] = {lv: {} for lv in LEVELS}
    gls: dict[str, dict] = {lv: {} for lv in ("", *LEVELS)}
    for tau in all_subsets([s for v in WORKLOAD.values() for s in v]):
        measured = {}
        for lv in LEVELS:
            if tau in measured_taus[lv]:
                m = margin(joint[lv], attrs, tau)
                noise = rng.normal(size=m.shape) * np.sqrt(VARIANCE[lv])
                raw[lv][tau] = residual(m + noise, tau)
                measured[lv] = [(raw[lv][tau], VARIANCE[lv])]
        if tau == ():
            measured["state"].append((margin(joint["state"], attrs, ()), 0.0))
        est, _ = hierarchical_gls(h, measured)
        for lv, e in est.items():
            gls[lv][tau] = e
    truth, fit, alone = {}, {}, {}
    for lv in ("", *LEVELS):
        sets = published_sets(lv)
        truth[lv] = {s: margin(joint[lv], attrs, s) for s in sets}
        fit[lv] = {s: reconstruct(gls[lv], s, SIZES) for s in sets}
        if lv:
            alone[lv] = {s: reconstruct(raw[lv], s, SIZES) for s in sets if all(t in raw[lv] for t in all_subsets([s]))}
    return h, truth, fit, alone
