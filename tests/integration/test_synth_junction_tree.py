"""Junction-tree synthesis: exact on decomposable models, sampling converges, chunks reproducible, budget."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.synth.spec import parse_synthesize
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.base import GroupAnswer
from privcube.privacy.noise import NoiseSource
from privcube.synth import get_estimator, sample_records
from privcube.synth.consistency import project
from privcube.synth.jt_fit import JunctionTreeEstimator, is_consistent, pair_weights
from privcube.synth.jt_model import stratified_uniforms
from privcube.synth.junction_tree import min_fill_cliques, select_junction_tree
from privcube.synth.sampler import marginals_from_answers, measured_marginals
from privcube.core.workload import Workload

DOM = Domain.from_mapping({"A": 3, "B": 2, "C": 4, "D": 3, "E": 2})
NAMES = DOM.attributes


def _decomposable(seed: int = 0) -> np.ndarray:
    """P(A,B,C) P(D | B,C) P(E | D): decomposable with cliques ABC, BCD, DE."""
    rng = np.random.default_rng(seed)
    pabc = rng.dirichlet(np.ones(24)).reshape(3, 2, 4)
    pd_bc = rng.dirichlet(np.ones(3), size=(2, 4))
    pe_d = rng.dirichlet(np.ones(2), size=3)
    return np.einsum("abc,bcd,de->abcde", pabc, pd_bc, pe_d)


def _marg(P: np.ndarray, attrs: tuple[str, ...]) -> np.ndarray:
    return project(P, NAMES, attrs)


def _fit(P: np.ndarray, cliques, n: float = 1000.0, **kw):  # noqa: ANN001, ANN003, ANN202
    est = JunctionTreeEstimator(**kw)
    return est, est.fit({c: _marg(P, c) * n for c in cliques}, DOM, total=n)


def test_exact_on_noiseless_marginals_of_a_decomposable_model() -> None:
    P = _decomposable()
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("D", "E")]
    est, model = _fit(P, cliques)
    assert est.info["input"] == "published" and est.info["edges_dropped"] == 0
    for c in cliques:
        np.testing.assert_allclose(model.marginal(c), _marg(P, c), atol=1e-12)
    # the fitted model is the decomposable model itself: also right on a pair it was never given
    np.testing.assert_allclose(model.marginal(("B", "D")), _marg(P, ("B", "D")), atol=1e-12)


def test_max_entropy_fit_matches_every_given_pair() -> None:
    P = _decomposable(1)
    pairs = [(a, b) for i, a in enumerate(NAMES) for b in NAMES[i + 1:]]
    _, model = _fit(P, pairs, tol=1e-10, max_sweeps=500)
    for c in pairs:
        np.testing.assert_allclose(model.marginal(c), _marg(P, c), atol=1e-7)


def test_sampled_marginals_converge_to_the_model() -> None:
    P = _decomposable(2)
    _, model = _fit(P, [("A", "B", "C"), ("B", "C", "D"), ("D", "E")])
    gaps = []
    for n in (2_000, 200_000):
        x = model.sample(n, np.random.default_rng(5))
        for c in [("A", "B", "C"), ("B", "C", "D"), ("D", "E")]:
            idx = [NAMES.index(a) for a in c]
            emp = np.bincount(np.ravel_multi_index(tuple(x[:, i] for i in idx), DOM.shape_of(c)),
                              minlength=DOM.size(c)).reshape(DOM.shape_of(c)) / n
            gaps.append((n, 0.5 * np.abs(emp - model.marginal(c)).sum()))
    small = max(g for n, g in gaps if n == 2_000)
    large = max(g for n, g in gaps if n == 200_000)
    assert large < 0.01 and large < small


def _counts(x: np.ndarray, attrs: tuple[str, ...]) -> np.ndarray:
    idx = [NAMES.index(a) for a in attrs]
    shape = DOM.shape_of(attrs)
    return np.bincount(np.ravel_multi_index(tuple(x[:, i] for i in idx), shape),
                       minlength=int(np.prod(shape))).reshape(shape).astype(float)


@pytest.mark.parametrize("n", [37, 1_000, 123_457])
def test_sampled_counts_are_within_one_record_of_the_model(n: int) -> None:
    """Controlled rounding: every root-clique cell is within one record of n·p, so is every level of the
    root's leading attribute (a run of cells), and every cell of a clique given its separator value is
    within one of m·p(new | separator) for the m records that hold it; the expected counts come from the
    model's beliefs (``marginal``), not from the sampler's tables."""
    P = _decomposable(6)
    _, model = _fit(P, [("A", "B", "C"), ("B", "C", "D"), ("D", "E")])
    x = model.sample(n, np.random.default_rng(n))
    root = tuple(NAMES[i] for i in model.tree.cliques[model.roots[0]])
    assert np.abs(_counts(x, root) - n * model.marginal(root)).max() < 1.0
    lead = root[:1]
    assert np.abs(_counts(x, lead) - n * model.marginal(lead)).max() < 1.0
    assert len(model.plan) == 2
    for cond in model.plan:
        sep = tuple(NAMES[i] for i in cond.sep)
        new = tuple(NAMES[i] for i in cond.new)
        joint = model.marginal(sep + new)
        p_new = joint / joint.sum(axis=tuple(range(len(sep), joint.ndim)), keepdims=True)
        m_sep = _counts(x, sep).reshape(joint.shape[:len(sep)] + (1,) * len(new))
        assert np.abs(_counts(x, sep + new) - m_sep * p_new).max() < 1.0, (sep, new)


def test_balanced_draws_follow_the_model_within_every_earlier_value() -> None:
    """A clique's new attribute is drawn near the model's conditional proportions for every value of an
    attribute drawn before it outside the separator (conditionally independent in the model), not merely
    on average: the largest gap between the count of (A=a, B=b, C=c) and (#A=a, B=b)·p(c | b) stays a few
    records (1.6–2.8 on five seeds), where independent draws (binomial s.d. of those cells up to 141
    records) are off by hundreds."""
    dom = Domain.from_mapping({"A": 4, "B": 2, "C": 5})
    rng = np.random.default_rng(3)
    pab = rng.dirichlet(np.ones(8)).reshape(4, 2)
    pc_b = rng.dirichlet(np.ones(5) * 2, size=2)
    joint = np.einsum("ab,bc->abc", pab, pc_b)
    est = JunctionTreeEstimator()
    model = est.fit({("A", "B"): joint.sum(axis=2) * 1000, ("B", "C"): joint.sum(axis=0) * 1000}, dom, total=1000)
    assert [tuple(c) for c in model.tree.cliques] == [(0, 1), (1, 2)] and model.plan[0].sep == (1,)
    n = 200_000
    x = model.sample(n, np.random.default_rng(0))
    abc = np.zeros((4, 2, 5))
    np.add.at(abc, (x[:, 0], x[:, 1], x[:, 2]), 1.0)
    expected = abc.sum(axis=2, keepdims=True) * pc_b[None, :, :]
    assert np.abs(abc - expected).max() <= 4.0
    # the same cells from independent draws of C given B: far off
    c = (rng.random(n)[:, None] > np.cumsum(pc_b, axis=1)[x[:, 1]]).sum(axis=1)
    indep = np.zeros((4, 2, 5))
    np.add.at(indep, (x[:, 0], x[:, 1], np.minimum(c, 4)), 1.0)
    assert np.abs(indep - indep.sum(axis=2, keepdims=True) * pc_b[None]).max() > 25.0


def test_a_further_component_is_balanced_against_the_first() -> None:
    """Independent components: the second root's cells come within a few records of (#A=a, B=b)·p(c) for
    every earlier (a, b), as a clique given its separator does (independent draws: hundreds off)."""
    dom = Domain.from_mapping({"A": 4, "B": 2, "C": 5})
    rng = np.random.default_rng(4)
    pab = rng.dirichlet(np.ones(8)).reshape(4, 2)
    pc = rng.dirichlet(np.ones(5) * 2)
    model = JunctionTreeEstimator().fit({("A", "B"): pab * 1000, ("C",): pc * 1000}, dom, total=1000)
    assert len(model.roots) == 2 and not model.plan
    x = model.sample(200_000, np.random.default_rng(1))
    abc = np.zeros((4, 2, 5))
    np.add.at(abc, (x[:, 0], x[:, 1], x[:, 2]), 1.0)
    assert np.abs(abc - abc.sum(axis=2, keepdims=True) * pc[None, None, :]).max() <= 4.0
    assert np.abs(abc.sum(axis=(0, 1)) - 200_000 * pc).max() < 1.0


def test_stratified_uniforms_are_one_per_stratum_slot() -> None:
    groups = np.array([0, 1, 0, 1, 1, 0, 2])
    u = stratified_uniforms(groups, np.random.default_rng(0))
    assert ((u >= 0) & (u < 1)).all()
    for g in (0, 1, 2):
        m = (groups == g).sum()
        # exactly one uniform in each of the m equal slots of [0, 1)
        assert sorted(np.floor(u[groups == g] * m).astype(int)) == list(range(m))


def test_chunks_are_reproducible_and_equal_on_dask() -> None:
    P = _decomposable(3)
    _, model = _fit(P, [("A", "B", "C"), ("B", "C", "D"), ("D", "E")])
    a = sample_records(model, DOM, 2500, noise=NoiseSource(11), chunk_size=700)
    b = sample_records(model, DOM, 2500, noise=NoiseSource(11), chunk_size=700)
    c = sample_records(model, DOM, 2500, noise=NoiseSource(12), chunk_size=700)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)
    # chunk c is a pure function of (seed, key, chunk index, its size): the first chunk does not depend on n
    d = sample_records(model, DOM, 700, noise=NoiseSource(11), chunk_size=700)
    pd.testing.assert_frame_equal(a.iloc[:700], d)


def test_cell_budget_drops_the_weakest_edges_and_says_so() -> None:
    P = _decomposable(4)
    pairs = [(a, b) for i, a in enumerate(NAMES) for b in NAMES[i + 1:]]
    tree_est = get_estimator("tree").fit({c: _marg(P, c) * 1000 for c in pairs}, DOM)
    budget = sum(DOM.size(e) for e in tree_est.edges) + 4  # the Chow–Liu tree fits, little more does
    est, model = _fit(P, pairs, max_cells=budget)
    assert est.info["cells"] <= budget and est.info["edges_dropped"] > 0
    assert len(est.info["dropped"]) == est.info["edges_dropped"]
    # the spanning tree went in first: every attribute is linked (one tree of cliques, no independent part)
    assert len(model.roots) == 1
    kept = {frozenset((NAMES[u], NAMES[v])) for c in model.tree.cliques for u in c for v in c if u < v}
    assert {frozenset(e) for e in tree_est.edges} <= kept


def test_min_fill_triangulation_of_a_cycle() -> None:
    cl = min_fill_cliques(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [2, 2, 2, 2])
    assert len(cl) == 2 and all(len(c) == 3 for c in cl)  # one chord: two triangles


def test_noise_level_pairs_get_no_edge() -> None:
    rng = np.random.default_rng(0)
    ind = np.outer([0.5, 0.5], [0.3, 0.7]) + rng.normal(0, 0.01, (2, 2))
    strong = np.array([[0.45, 0.05], [0.05, 0.45]])
    w = pair_weights({(0, 1): np.maximum(ind, 0), (0, 2): strong}, {(0, 1): 0.05, (0, 2): 0.05})
    assert w[(0, 1)] <= 0 < w[(0, 2)]
    tree = select_junction_tree(3, [2, 2, 2], w, 1e6)
    assert (0, 2) in tree.kept and tree.unsupported == [(0, 1)]


def test_published_is_used_when_set_and_fallback_made_consistent() -> None:
    g = Workload.marginals(DOM, [("A",)]).groups[0]
    raw = np.array([10.0, -2.0, 5.0])
    pub = np.array([8.0, 0.0, 5.0])
    est, _ = marginals_from_answers([GroupAnswer(g, raw, np.ones(3), pub)], DOM)
    np.testing.assert_array_equal(est[("A",)], pub)
    est, _ = marginals_from_answers([GroupAnswer(g, raw, np.ones(3))], DOM)
    np.testing.assert_array_equal(est[("A",)], raw)
    assert not is_consistent({("A",): raw}, DOM)  # negative: the estimator runs consistency first
    e = JunctionTreeEstimator()
    e.fit({("A",): raw}, DOM)
    assert e.info["input"] == "made consistent"


def test_measured_marginals_project_from_holders() -> None:
    P = _decomposable(5) * 1000
    cliques = [("A", "B", "C"), ("B", "C", "D"), ("D", "E")]
    answers = [GroupAnswer(g, _marg(P, c).ravel(), np.ones(DOM.size(c)))
               for g, c in zip(Workload.marginals(DOM, cliques).groups, cliques)]
    est, var = measured_marginals(answers, DOM, [["B", "C"], ["D", "E"]])
    assert set(est) == {("B", "C"), ("D", "E"), ("A",)}
    np.testing.assert_allclose(est[("B", "C")], _marg(P, ("B", "C")))
    assert var[("B", "C")] == pytest.approx(3.0)  # 3 cells of A summed per cell


def test_seeded_records_are_the_same_in_every_process() -> None:
    """Measured marginals, model and records do not depend on the process's string-hash order."""
    import subprocess
    import sys

    script = (
        "import hashlib, numpy as np\n"
        "from privcube.core.domain import Domain\n"
        "from privcube.mechanisms.base import GroupAnswer\n"
        "from privcube.privacy.noise import NoiseSource\n"
        "from privcube.synth import get_estimator, sample_records\n"
        "from privcube.synth.sampler import measured_marginals\n"
        "from privcube.core.workload import Workload\n"
        "dom = Domain.from_mapping({'A': 3, 'B': 2, 'C': 4, 'D': 3, 'E': 2})\n"
        "rng = np.random.default_rng(0)\n"
        "cl = [('A', 'B'), ('B', 'C'), ('C', 'D'), ('D', 'E'), ('A', 'E'), ('B', 'D')]\n"
        "ans = [GroupAnswer(g, rng.uniform(10, 100, dom.size(c)), np.ones(dom.size(c)))\n"
        "       for g, c in zip(Workload.marginals(dom, cl).groups, cl)]\n"
        "est, var = measured_marginals(ans, dom, [list(c) for c in cl])\n"
        "m = get_estimator('junction-tree').fit(est, dom, total=500.0, variances=var)\n"
        "x = sample_records(m, dom, 3000, noise=NoiseSource(7)).to_numpy()\n"
        "print(list(est), hashlib.sha256(x.tobytes()).hexdigest())\n")
    outs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outs) == 1, outs


def test_bad_estimator_names_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as e:
        get_estimator("junction_tree")
    assert "\n" not in str(e.value) and "'junction_tree'" in str(e.value) and "junction-tree" in str(e.value)
    wl = Workload.from_config([{"kway": 2}], DOM)
    with pytest.raises(ConfigError) as e:
        parse_synthesize({"estimator": "gan"}, wl)
    assert "\n" not in str(e.value) and "synthesize.estimator" in str(e.value) and "'gan'" in str(e.value)
    with pytest.raises(ConfigError, match="synthesize.max_cells"):
        parse_synthesize({"max_cells": 0}, wl)
    assert parse_synthesize(True, wl)["estimator"] == "junction-tree"


def test_job_with_junction_tree_spends_nothing_and_writes_records(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    n = 3000
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 3
    c = (b > 0).astype(int)
    pd.DataFrame({"a": a, "b": b, "c": c}).to_parquet(tmp_path / "d.parquet", index=False)
    (tmp_path / "dom.json").write_text(json.dumps({"a": 3, "b": 3, "c": 2}))
    base = {"data": {"path": "d.parquet", "domain": "dom.json"}, "mechanism": {"name": "residual-planner"},
            "workload": [{"kway": 2}], "privacy": {"epsilon": 10, "delta": 1e-6}, "cluster": {"type": "threads"}}
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "synth.yaml").write_text(yaml.safe_dump({**base, "synthesize": {"rows": 1000, "chunk_size": 300}}))
    plain = api.run(tmp_path / "plain.yaml", tmp_path / "p", seed=3, quiet=True)
    synth = api.run(tmp_path / "synth.yaml", tmp_path / "s", seed=3, quiet=True)
    assert json.loads((tmp_path / "p" / "ledger.json").read_text())["charges"] == \
        json.loads((tmp_path / "s" / "ledger.json").read_text())["charges"]
    assert plain.ledger["charges"] == synth.ledger["charges"]
    info = synth.report["synthetic_records"]
    assert info["estimator"] == "junction-tree" and info["budget_spent"] == 0.0 and info["files"] == 4
    recs = pd.concat([pd.read_parquet(f) for f in sorted((tmp_path / "s" / "synthetic" / "records").glob("part-*"))])
    assert len(recs) == 1000
    # the strong a→c link of the data survives in the records (c = 0 only when b = 0)
    assert recs.loc[recs.c == 0, "b"].eq(0).mean() > 0.8


def test_clique_table_sums_and_scalings_equal_numpy() -> None:
    """factor_ops (merged axes, BLAS sums, gathers) give numpy's sums and broadcast products."""
    from privcube.synth.factor_ops import project_idx, scale_idx

    rng = np.random.default_rng(0)
    cache: dict = {}
    for _ in range(300):
        d = int(rng.integers(1, 8))
        attrs = tuple(int(a) for a in sorted(rng.choice(20, d, replace=False)))
        shape = tuple(int(x) for x in rng.integers(1, 5, d))
        arr = rng.random(shape)
        k = int(rng.integers(0, d + 1))
        sub = tuple(int(a) for a in sorted(rng.choice(attrs, k, replace=False))) if k else ()
        axes = tuple(i for i, a in enumerate(attrs) if a not in sub)
        want = arr.sum(axis=axes) if axes else arr
        got = project_idx(arr, attrs, sub)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)
        f = rng.random(want.shape)
        prod = arr * f.reshape([n if a in sub else 1 for n, a in zip(shape, attrs)])
        np.testing.assert_allclose(scale_idx(arr.copy(), f, sub, attrs), prod, rtol=1e-12)
        np.testing.assert_allclose(scale_idx(arr.copy(), f, sub, attrs, cache), prod, rtol=1e-12)
