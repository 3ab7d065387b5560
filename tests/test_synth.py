"""Single-table synthesizer: consistency, Chow–Liu tree, chunked seeded sampling, pluggable estimators."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from privcube.domain import Domain
from privcube.errors import ConfigError
from privcube.privacy.noise import NoiseSource
from privcube.synth import MarginalEstimator, TreeEstimator, synthesize
from privcube.synth.consistency import make_consistent, norm_sub
from privcube.synth.tree_model import TreeModel, max_spanning_forest, mutual_information

DOM = Domain(("A", "B", "C", "D"), (3, 4, 2, 2))


def _truth() -> np.ndarray:
    """Joint of a Markov chain A→B→C with D independent, written out cell by cell."""
    pa = np.array([0.5, 0.3, 0.2])
    pb_a = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [0.05, 0.05, 0.2, 0.7]])
    pc_b = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [0.15, 0.85]])
    pd = np.array([0.35, 0.65])
    P = np.zeros(DOM.shape)
    for a, b, c, d in itertools.product(range(3), range(4), range(2), range(2)):
        P[a, b, c, d] = pa[a] * pb_a[a, b] * pc_b[b, c] * pd[d]
    return P


def _marg(P: np.ndarray, attrs: tuple[str, ...]) -> np.ndarray:
    axes = tuple(k for k, a in enumerate(DOM.attributes) if a not in attrs)
    return P.sum(axis=axes)


def test_tree_synthesis_matches_low_order_marginals() -> None:
    P = _truth()
    n = 60000
    pairs = list(itertools.combinations(DOM.attributes, 2))
    est = {c: n * _marg(P, c) for c in pairs}
    df = synthesize(est, DOM, n, seed=3, chunk_size=7000)
    assert list(df.columns) == list(DOM.attributes) and len(df) == n
    codes = df.to_numpy()
    for c in list(pairs) + [(a,) for a in DOM.attributes]:
        idx = [DOM.index(a) for a in c]
        emp = np.bincount(np.ravel_multi_index(tuple(codes[:, i] for i in idx), DOM.shape_of(c)),
                          minlength=DOM.size(c)) / n
        p = _marg(P, c).ravel()
        assert np.all(np.abs(emp - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-4), c


def test_tree_picks_chain_edges() -> None:
    P = _truth()
    est = {c: _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}
    model = TreeModel.fit(est, DOM)
    und = {frozenset(e) for e in model.edges}
    assert frozenset(("A", "B")) in und and frozenset(("B", "C")) in und
    assert frozenset(("A", "C")) not in und
    assert np.allclose(model.marginal(("A", "C")), _marg(P, ("A", "C")), atol=1e-12)


def test_mutual_information_and_kruskal() -> None:
    assert abs(mutual_information(np.outer([0.2, 0.8], [0.5, 0.5]))) < 1e-12
    assert abs(mutual_information(np.diag([0.5, 0.5])) - np.log(2)) < 1e-12
    assert sorted(max_spanning_forest(3, [(1.0, 0, 1), (3.0, 1, 2), (2.0, 0, 2)])) == [(0, 2), (1, 2)]


def test_consistency_makes_nonnegative_agreeing_marginals() -> None:
    rng = np.random.default_rng(0)
    P = _truth()
    cliques = [("A", "B"), ("B", "C"), ("A", "C", "D")]
    noisy = {c: 1000 * _marg(P, c) + rng.normal(0, 20, _marg(P, c).shape) for c in cliques}
    out = make_consistent(noisy, DOM, rounds=30)
    tots = [v.sum() for v in out.values()]
    assert np.ptp(tots) < 1e-6 * tots[0]
    assert all(np.all(v >= 0) for v in out.values())
    b1, b2 = out[("A", "B")].sum(0), out[("B", "C")].sum(1)
    assert np.abs(b1 - b2).max() < 1.0
    a1, a2 = out[("A", "B")].sum(1), out[("A", "C", "D")].sum((1, 2))
    assert np.abs(a1 - a2).max() < 1.0
    fixed = make_consistent(noisy, DOM, total=1000.0)
    assert all(abs(v.sum() - 1000.0) < 1e-6 for v in fixed.values())


def test_consistency_closed_form_two_cliques() -> None:
    d = Domain(("X", "Y"), (2, 2))
    # projections on X disagree: [6, 4] vs [4, 6]; equal weights ⇒ target [5, 5]
    m = {("X",): np.array([6.0, 4.0]), ("X", "Y"): np.array([[2.0, 2.0], [3.0, 3.0]])}
    out = make_consistent(m, d, rounds=1)
    # the 1-way clique's variance-per-projected-cell is 1; the 2-way's is 2 (two cells summed)
    w1, w2 = 1.0, 0.5
    target_total = 10.0
    x_t = (w1 * np.array([6.0, 4.0]) + w2 * np.array([4.0, 6.0])) / (w1 + w2)
    assert abs(out[("X",)].sum() - target_total) < 1e-9
    assert np.allclose(out[("X",)], x_t) and np.allclose(out[("X", "Y")].sum(1), x_t)
    assert np.allclose(norm_sub(np.array([-1.0, 2.0, 3.0])), [0.0, 1.5, 2.5])


def test_sampling_is_seeded_and_chunk_keyed() -> None:
    P = _truth()
    est = {c: 100 * _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}
    a = synthesize(est, DOM, 1000, noise=NoiseSource(9), chunk_size=300)
    b = synthesize(est, DOM, 1000, noise=NoiseSource(9), chunk_size=300)
    c = synthesize(est, DOM, 1000, noise=NoiseSource(10), chunk_size=300)
    assert a.equals(b) and not a.equals(c)
    # chunk k is a pure function of (seed, key, k): a shorter run is a prefix at the same chunk size
    d = synthesize(est, DOM, 600, noise=NoiseSource(9), chunk_size=300)
    assert d.equals(a.iloc[:600])


class _ConstEstimator:
    """A custom estimator: every record is the most frequent cell of each 1-way marginal."""

    def __init__(self) -> None:
        self.calls = 0

    def fit(self, marginals, domain, *, total=None, variances=None):  # noqa: ANN001, ANN201
        self.calls += 1
        modes = []
        for a in domain.attributes:
            c = next(c for c in marginals if a in c)
            arr = np.asarray(marginals[c]).reshape(domain.shape_of(c))
            ax = tuple(k for k, x in enumerate(c) if x != a)
            modes.append(int(np.argmax(arr.sum(axis=ax))))

        class _M:
            def sample(self, n, rng):  # noqa: ANN001, ANN201
                return np.tile(modes, (n, 1))
        return _M()


def test_pluggable_estimator() -> None:
    P = _truth()
    est = {c: _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}
    e = _ConstEstimator()
    assert isinstance(e, MarginalEstimator) and isinstance(TreeEstimator(), MarginalEstimator)
    df = synthesize(est, DOM, 50, seed=1, estimator=e)
    assert e.calls == 1
    # by hand: P(B) = pa·pb_a = [.39, .24, .15, .22]; P(C=1) = .039+.192+.075+.187 = .493 < .5
    assert (df.to_numpy() == np.array([0, 0, 0, 1])).all()
    with pytest.raises(ConfigError, match="unknown estimator"):
        synthesize(est, DOM, 5, seed=1, estimator="nope")


def test_mbi_estimator_optional() -> None:
    pytest.importorskip("mbi", reason="optional extra 'mbi' (Private-PGM) is not installed")
    P = _truth()
    est = {c: 5000 * _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}
    df = synthesize(est, DOM, 5000, seed=1, estimator="mbi")
    assert abs((df["A"] == 0).mean() - 0.5) < 0.05


def test_dask_chunked_sampling_equals_serial() -> None:
    from privcube.graphs.synth_sampling import sample_records_parallel
    from privcube.synth.sampler import sample_records

    P = _truth()
    est = {c: 100 * _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}
    model = TreeEstimator().fit(est, DOM)
    serial = sample_records(model, DOM, 2500, noise=NoiseSource(4), key=("t",), chunk_size=700)
    par = sample_records_parallel(model, DOM, 2500, noise=NoiseSource(4), key=("t",), chunk_size=700)
    assert len(par) == 2500 and par.equals(serial)
