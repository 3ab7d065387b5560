"""Single-table synthesizer: consistency, Chow–Liu tree, chunked seeded sampling, pluggable estimators."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
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
    est[("C", "A")] = est.pop(("A", "C")).T  # a clique given out of domain order
    df = synthesize(est, DOM, 20000, seed=1, estimator="mbi", total=5000.0)
    codes = df[list(DOM.attributes)].to_numpy()
    for c in (("A", "B"), ("B", "C"), ("A", "C")):
        idx = [DOM.index(a) for a in c]
        emp = np.bincount(np.ravel_multi_index(tuple(codes[:, i] for i in idx), DOM.shape_of(c)),
                          minlength=DOM.size(c)) / len(codes)
        assert np.abs(emp - _marg(P, c).ravel()).max() < 0.02, c


def test_mbi_estimator_absent_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_mbi(name, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == "mbi" or name.startswith("mbi."):
            raise ImportError("No module named 'mbi'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mbi)
    with pytest.raises(ConfigError, match="optional package 'mbi'.*estimator 'tree'"):
        synthesize({("A",): np.ones(3)}, DOM, 5, seed=1, estimator="mbi")


# ------------------------------------------------------------- from the engine's own releases
def _records(n: int, seed: int) -> np.ndarray:
    """n records drawn from the chain A→B→C, D independent (the truth is _truth())."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(DOM.size(), size=n, p=_truth().ravel())
    return np.stack(np.unravel_index(flat, DOM.shape), axis=1).astype(np.int64)


def _check_pairs(codes: np.ndarray, tol: float) -> None:
    P = _truth()
    for c in itertools.combinations(DOM.attributes, 2):
        idx = [DOM.index(a) for a in c]
        emp = np.bincount(np.ravel_multi_index(tuple(codes[:, i] for i in idx), DOM.shape_of(c)),
                          minlength=DOM.size(c)) / len(codes)
        assert np.abs(emp - _marg(P, c).ravel()).max() < tol, c


@pytest.mark.parametrize("mech", ["residual-planner", "aim-grem"])
def test_synthesize_from_engine_answers(mech: str) -> None:
    """ResidualPlanner / AIM+GReM releases → records whose 2-way marginals follow the data's distribution;
    the synthesis charges nothing (the ledger is the mechanism's alone)."""
    from privcube.mechanisms import get_mechanism
    from privcube.core.oracle import ArrayOracle
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.synth import synthesize_from_answers
    from privcube.core.workload import Workload

    n = 40000
    oracle = ArrayOracle(DOM, _records(n, 5))
    budget = PrivacyBudget.from_rho(2.0, 1e-9)
    ledger = PrivacyLedger(budget)
    res = get_mechanism(mech)().run(oracle, Workload.kway(DOM, 2), budget, ledger, NoiseSource(1))
    spent, n_charges = ledger.spent_rho, len(ledger.to_dict()["charges"])
    assert 0 < spent <= budget.rho * (1 + 1e-9) and n_charges > 0
    df = synthesize_from_answers(res.answers, DOM, n, seed=2, chunk_size=9000)
    assert ledger.spent_rho == spent and len(ledger.to_dict()["charges"]) == n_charges
    assert list(df.columns) == list(DOM.attributes) and len(df) == n
    # sampling error of the data and of the synthetic sample (~5σ at p = ½) plus the release noise
    _check_pairs(df.to_numpy(), 0.02)


def test_marginals_from_answers_skips_non_marginal_groups_and_refuses_none() -> None:
    from privcube.core.errors import DataError
    from privcube.mechanisms.base import GroupAnswer
    from privcube.synth import marginals_from_answers
    from privcube.core.workload import Workload

    w = Workload.from_config([{"attributes": ["A", "B"]}, {"attributes": ["C"], "queries": {"C": "prefix"}}], DOM)
    ab, cp = w.groups
    answers = [GroupAnswer(ab, np.arange(12.0), np.full(12, 4.0)), GroupAnswer(cp, np.array([1.0, 2.0]))]
    est, var = marginals_from_answers(answers, DOM)
    assert list(est) == [("A", "B")] and est[("A", "B")].shape == (3, 4) and est[("A", "B")][1, 2] == 6.0
    assert var == {("A", "B"): 4.0}
    with pytest.raises(DataError, match="no marginal answers"):
        marginals_from_answers(answers[1:], DOM)
    with pytest.raises(DataError, match="11 cells"):
        marginals_from_answers([GroupAnswer(ab, np.arange(11.0))], DOM)


def test_parquet_records_with_decoded_labels(tmp_path) -> None:  # noqa: ANN001
    """Chunks written as Parquet (one file per chunk), labels decoded from the schema next to the codes."""
    import pandas as pd

    from privcube.storage.schema import load_schema
    from privcube.synth.records import write_records
    from privcube.synth.sampler import sample_records

    schema = load_schema({"attributes": [
        {"name": "A", "type": "categorical", "categories": ["red", "green", "blue"]},
        {"name": "B", "type": "numeric", "bins": [0, 18, 30, 65, 120]},
        {"name": "C", "type": "integer", "size": 2},
        {"name": "D", "type": "date", "bins": ["2010-01-01", "2014-01-01", "2020-01-01"]}]})
    assert schema.domain == DOM
    P = _truth()
    model = TreeEstimator().fit({c: 100 * _marg(P, c) for c in itertools.combinations(DOM.attributes, 2)}, DOM)
    out = tmp_path / "people"
    write_records(model, DOM, 2500, out, noise=NoiseSource(4), schema=schema, key=("t",), chunk_size=700)
    files = sorted(p.name for p in out.iterdir())
    assert files == [f"part-{i:05d}.parquet" for i in range(4)]  # one file per chunk: 700+700+700+400
    df = pd.read_parquet(out)
    serial = sample_records(model, DOM, 2500, noise=NoiseSource(4), key=("t",), chunk_size=700)
    pd.testing.assert_frame_equal(df[list(DOM.attributes)].reset_index(drop=True), serial, check_dtype=False)
    assert (df["A_label"] == np.array(["red", "green", "blue"])[df["A"]]).all()
    assert (df["B_label"] == np.array(["[0, 18)", "[18, 30)", "[30, 65)", "[65, 120)"])[df["B"]]).all()
    assert (df["D_label"] == np.array(["[2010-01-01, 2014-01-01)", "[2014-01-01, 2020-01-01)"])[df["D"]]).all()
    assert "C_label" not in df  # plain integer codes have no labels


def test_records_written_in_windows_through_a_run_context_map(tmp_path) -> None:  # noqa: ANN001
    """write_records: chunks through the run context's map (a real dask cluster), in windows, files in
    order, same rows as the serial sampler; small outputs never reach the map."""
    import pandas as pd
    from distributed import Client

    import privcube.synth.records as records
    from privcube.graphs.execution import run_context
    from privcube.synth.sampler import sample_records

    model = TreeEstimator().fit({c: 100 * _marg(_truth(), c) for c in itertools.combinations(DOM.attributes, 2)}, DOM)
    serial = sample_records(model, DOM, 2500, noise=NoiseSource(4), key=("t",), chunk_size=700)
    calls: list[int] = []
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        ctx_map = run_context(client).map

        def counted(fn, items, **kw):  # noqa: ANN001, ANN003, ANN202
            calls.append(len(items))
            return ctx_map(fn, items, **kw)

        n = records.write_records(model, DOM, 2500, tmp_path / "a", noise=NoiseSource(4), key=("t",),
                                  chunk_size=700, map=counted, window=2)
        assert calls == [] and n == 4  # 2,500 records: sampled in this process
        n = records.write_records(model, DOM, 2500, tmp_path / "b", noise=NoiseSource(4), key=("t",),
                                  chunk_size=700, map=counted, window=2, local_rows=0)
    assert n == 4 and calls == [2, 2]  # two windows of two chunks, as tasks on the cluster
    for folder in ("a", "b"):
        files = sorted((tmp_path / folder).iterdir())
        assert [f.name for f in files] == [f"part-{i:05d}.parquet" for i in range(4)]
        df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        pd.testing.assert_frame_equal(df, serial, check_dtype=False)
