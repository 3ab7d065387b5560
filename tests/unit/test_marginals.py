"""Marginal pass without a client (threaded scheduler / in-memory): exact equality with pandas groupby."""
from __future__ import annotations

import io
import itertools
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from reference_counts import groupby_dense
from privcube.core.errors import ConfigError, DataError, DomainError, MemoryLimitError
from privcube.graphs import progress as prog
from privcube.core.counting import derive_marginal, flat_index, plan_batch
from privcube.graphs.marginals import DataOracle, compute_marginals
from privcube.core.oracle import MarginalOracle

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ADULT = DATA / "adult"


@pytest.fixture(autouse=True)
def _quiet():
    """Keep progress bars out of test output."""
    prog.set_quiet(True)
    yield
    prog.set_quiet(False)


@pytest.fixture(scope="module")
def adult():
    """(dask frame of adult with several partitions, pandas frame, domain)."""
    if not (ADULT / "adult.csv").exists():
        pytest.skip(f"adult data not found at {ADULT} (shared data folder absent)")
    domain = Domain.load(ADULT / "adult-domain.json")
    ddf = dd.read_csv(ADULT / "adult.csv", blocksize=400_000)
    ddf = ddf[list(domain.attributes)]
    pdf = pd.read_csv(ADULT / "adult.csv")[list(domain.attributes)]
    assert ddf.npartitions > 1
    return ddf, pdf, domain


ADULT_CLIQUES = [
    ("age",), ("sex",), ("native-country",), ("income>50K",),
    ("race", "sex"), ("education-num", "income>50K"), ("age", "hours-per-week"),
    ("workclass", "education-num", "sex"), ("occupation", "race", "income>50K"),
    ("sex", "race"),  # permuted order of a requested clique
    (),
]


def test_adult_threads_equal_pandas(adult):
    """1-, 2-, 3-way marginals on the threaded scheduler equal pandas groupby counts exactly."""
    ddf, pdf, domain = adult
    with dask.config.set(scheduler="threads"):
        res = compute_marginals(ddf, domain, ADULT_CLIQUES, split_every=2)
    assert list(res) == ADULT_CLIQUES
    for c in ADULT_CLIQUES:
        assert res[c].dtype == np.int64
        np.testing.assert_array_equal(res[c], groupby_dense(pdf, c, domain.shape_of(c)))


def test_adult_pandas_fast_path(adult):
    """A pandas frame is counted in memory and matches groupby."""
    _, pdf, domain = adult
    res = compute_marginals(pdf, domain, ADULT_CLIQUES[:9])
    for c in ADULT_CLIQUES[:9]:
        np.testing.assert_array_equal(res[c], groupby_dense(pdf, c, domain.shape_of(c)))


def _random_codes(domain: Domain, n: int, seed: int) -> pd.DataFrame:
    """Skewed random integer codes for every attribute."""
    rng = np.random.default_rng(seed)
    cols = {}
    for a, s in zip(domain.attributes, domain.shape):
        p = rng.dirichlet(np.full(s, 0.5))
        cols[a] = rng.choice(s, size=n, p=p).astype(np.int16)
    return pd.DataFrame(cols)


def test_multi_file_parquet_equals_pandas(tmp_path):
    """A Parquet dataset split over several files (row groups too) gives pandas' counts."""
    domain = Domain.from_mapping({"a": 7, "b": 3, "c": 11, "d": 2, "e": 5})
    pdf = _random_codes(domain, 30_000, seed=1)
    bounds = [0, 4000, 9000, 9001, 17000, 30000]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        pdf.iloc[lo:hi].to_parquet(tmp_path / f"part-{i}.parquet", index=False, row_group_size=2500)
    ddf = dd.read_parquet(str(tmp_path), split_row_groups=True)
    assert ddf.npartitions >= 5
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(domain.attributes, k)]
    res = compute_marginals(ddf, domain, cliques, split_every=3)
    for c in cliques:
        np.testing.assert_array_equal(res[c], groupby_dense(pdf, c, domain.shape_of(c)))


def test_weight_column_matches_uncompressed():
    """Distinct-row compression (count column) yields the same marginals as the raw rows."""
    domain = Domain.from_mapping({"x": 4, "y": 3, "z": 6})
    raw = _random_codes(domain, 5000, seed=2)
    comp = raw.groupby(list(domain.attributes)).size().rename("count").reset_index()
    assert len(comp) < len(raw)
    cliques = [("x",), ("y", "z"), ("z", "x", "y"), ()]
    res = compute_marginals(dd.from_pandas(comp, npartitions=4), domain, cliques, weight="count")
    for c in cliques:
        np.testing.assert_array_equal(res[c], groupby_dense(raw, c, domain.shape_of(c)))
    # the reference with weights computed by groupby-sum agrees too
    np.testing.assert_array_equal(res[("y", "z")], groupby_dense(comp, ("y", "z"), (3, 6), weight="count"))


def test_derived_subsets_equal_direct(adult):
    """Subset marginals derived from a superset equal ones counted directly."""
    ddf, pdf, domain = adult
    batch = [("workclass", "race", "sex"), ("race", "sex"), ("sex", "workclass"), ("race",), ()]
    roots, derived = plan_batch(domain, [domain.canonical(c) for c in batch])
    assert roots == [("workclass", "race", "sex")]
    assert set(derived) == {("race", "sex"), ("workclass", "sex"), ("race",), ()}
    together = compute_marginals(ddf, domain, batch)
    for c in batch[1:]:
        alone = compute_marginals(ddf, domain, [c])[c]
        np.testing.assert_array_equal(together[c], alone)
        np.testing.assert_array_equal(together[c], groupby_dense(pdf, c, domain.shape_of(c)))


def test_superset_too_big_is_not_used_for_derivation():
    """With a tiny derive limit both cliques are counted directly, results still correct."""
    domain = Domain.from_mapping({"a": 5, "b": 6})
    pdf = _random_codes(domain, 2000, seed=3)
    roots, derived = plan_batch(domain, [("a", "b"), ("a",)], derive_max_cells=10)
    assert sorted(roots) == [("a",), ("a", "b")] and derived == {}
    res = compute_marginals(pdf, domain, [("a", "b"), ("a",)], derive_max_cells=10)
    np.testing.assert_array_equal(res[("a",)], groupby_dense(pdf, ("a",), (5,)))


def test_derive_marginal_axis_order():
    """derive_marginal sums dropped axes and transposes to the requested order."""
    rng = np.random.default_rng(0)
    mu = rng.integers(0, 100, size=(2, 3, 4))
    np.testing.assert_array_equal(derive_marginal(mu, ("a", "b", "c"), ("c", "a")), mu.sum(axis=1).T)
    np.testing.assert_array_equal(derive_marginal(mu, ("a", "b", "c"), ()), mu.sum())
    with pytest.raises(DomainError, match="'z'"):
        derive_marginal(mu, ("a", "b", "c"), ("z",))


def test_flat_index_matches_ravel_multi_index():
    """The stride-arithmetic index equals numpy's ravel_multi_index for mixed dtypes."""
    rng = np.random.default_rng(4)
    shape = (7, 3, 11, 2)
    cols = [rng.integers(0, s, 1000).astype(dt) for s, dt in zip(shape, (np.uint8, np.int16, np.int64, bool))]
    np.testing.assert_array_equal(flat_index(cols, shape), np.ravel_multi_index(tuple(cols), shape))


def test_memory_limit_before_compute():
    """A huge clique raises MemoryLimitError naming it, without touching the data."""
    domain = Domain.from_mapping({f"v{i}": 1000 for i in range(4)})
    calls = []

    def boom(i: int) -> pd.DataFrame:
        calls.append(i)
        raise RuntimeError("data was read")

    meta = pd.DataFrame({a: pd.Series([], dtype="int64") for a in domain.attributes})
    ddf = dd.from_map(boom, [0, 1], meta=meta, enforce_metadata=False)
    with pytest.raises(MemoryLimitError, match=r"\('v0', 'v1', 'v2', 'v3'\)") as ei:
        compute_marginals(ddf, domain, [("v0",), ("v0", "v1", "v2", "v3")])
    assert "1,000,000,000,000 cells" in str(ei.value)
    with pytest.raises(MemoryLimitError, match=r"\('v0', 'v1'\)"):
        compute_marginals(ddf, domain, [("v0", "v1")], max_cells=10_000)
    assert calls == []


def test_missing_column_and_bad_values():
    """DataError names a missing column, a missing weight column, and an out-of-domain value."""
    domain = Domain.from_mapping({"a": 3, "b": 2})
    pdf = pd.DataFrame({"a": [0, 1, 2], "c": [0, 1, 1]})
    with pytest.raises(DataError, match="'b'"):
        compute_marginals(dd.from_pandas(pdf, npartitions=1), domain, [("a",)] + [("b",)])
    with pytest.raises(DataError, match="'b'"):
        DataOracle(pdf, domain)
    ok = pd.DataFrame({"a": [0, 1, 2], "b": [0, 1, 1]})
    with pytest.raises(DataError, match="'w'"):
        compute_marginals(ok, domain, [("a",)], weight="w")
    bad = pd.DataFrame({"a": [0, 3, 2], "b": [0, 1, 1]})
    with pytest.raises(DataError, match=r"column 'a' has a value outside the domain"):
        compute_marginals(dd.from_pandas(bad, npartitions=2), domain, [("a", "b")])
    with pytest.raises(DomainError, match="'q'"):
        compute_marginals(ok, domain, [("q",)])
    with pytest.raises(ConfigError, match="split_every"):
        compute_marginals(ok, domain, [("a",)], split_every=1)


def test_total_only_batch(adult):
    """A batch holding only the empty clique counts rows."""
    ddf, pdf, domain = adult
    assert int(compute_marginals(ddf, domain, [()])[()]) == len(pdf)
    assert DataOracle(ddf, domain).total() == len(pdf)


def test_data_oracle_caches_and_batches(adult):
    """DataOracle is a MarginalOracle; repeated and subset requests need no new pass."""
    ddf, pdf, domain = adult
    oracle = DataOracle(ddf, domain)
    assert isinstance(oracle, MarginalOracle) and oracle.exact
    first = oracle.marginals([("race", "sex", "income>50K"), ("age",)])
    assert oracle.n_passes == 1
    again = oracle.marginals([("sex", "race"), ("income>50K",), ("age",), ()])
    assert oracle.n_passes == 1
    np.testing.assert_array_equal(again[("sex", "race")], groupby_dense(pdf, ("sex", "race"), (2, 5)))
    np.testing.assert_array_equal(first[("age",)], groupby_dense(pdf, ("age",), (85,)))
    assert oracle.total() == len(pdf)
    oracle.marginals([("workclass",)])
    assert oracle.n_passes == 2


def test_progress_bar_quiet_and_loud():
    """The bar writes one updating line when loud and nothing when quiet."""
    buf = io.StringIO()
    prog.set_quiet(False)
    with prog.progress("step", 4, stream=buf) as update:
        for _ in range(4):
            update(1)
    text = buf.getvalue()
    assert text.endswith("\n") and "step [" in text and "4/4" in text
    prog.set_quiet(True)
    quiet = io.StringIO()
    with prog.progress("step", 4, stream=quiet) as update:
        update(4)
    assert quiet.getvalue() == ""


def test_marginal_dask_blocks_equal_pandas_counts(tmp_path):
    """A large marginal as a chunked dask array (forced into many blocks) equals pandas counts."""
    import dask.dataframe as dd

    from privcube.graphs.marginals import marginal_dask
    from privcube.storage.zarr_store import TensorStore

    rng = np.random.default_rng(11)
    n = 5000
    pdf = pd.DataFrame({"a": rng.integers(0, 7, n), "b": rng.integers(0, 5, n), "c": rng.integers(0, 3, n),
                        "count": rng.integers(1, 4, n)})
    dom = Domain.from_mapping({"a": 7, "b": 5, "c": 3})
    ddf = dd.from_pandas(pdf, npartitions=9)
    arr = marginal_dask(ddf, dom, ("c", "a", "b"), block_cells=10, split_every=2)
    assert arr.numblocks[0] == 3 and arr.shape == (3, 7, 5)  # a slab of 35 cells > 10: one slab per block
    truth = np.zeros((3, 7, 5), dtype=np.int64)
    np.add.at(truth, (pdf["c"], pdf["a"], pdf["b"]), 1)
    assert np.array_equal(arr.compute(scheduler="synchronous"), truth)
    weighted = marginal_dask(ddf, dom, ("a", "b"), weight="count", block_cells=12)
    wtruth = np.zeros((7, 5), dtype=np.int64)
    np.add.at(wtruth, (pdf["a"], pdf["b"]), pdf["count"])
    assert np.array_equal(weighted.compute(scheduler="synchronous"), wtruth)
    store = TensorStore(tmp_path / "s.zarr")
    store.write("big", arr)
    assert np.array_equal(store.read("big"), truth)


def test_oracle_abilities_are_declared_not_probed():
    """DataOracle declares its optional abilities (Protocols in privcube.core.oracle); an ArrayOracle has none, and
    the oracle functions fall back to exact marginals here (measure) or say the ability is absent (None)."""
    from privcube.core.domain import Domain
    from privcube.core.oracle import (
        ArrayOracle,
        ClusterMarginalsOracle,
        LazyMarginalOracle,
        MeasuringOracle,
        lazy_marginal,
        marginal_futures,
        measure,
    )

    dom = Domain(("a", "b"), (3, 2))
    rec = np.array([[0, 1], [2, 1], [2, 0], [1, 1]])
    data = DataOracle(pd.DataFrame(rec, columns=["a", "b"]), dom)
    plain = ArrayOracle(dom, rec)
    for ability in (MeasuringOracle, ClusterMarginalsOracle, LazyMarginalOracle):
        assert isinstance(data, ability) and issubclass(DataOracle, ability)
        assert not isinstance(plain, ability)
    assert isinstance(plain, MarginalOracle) and isinstance(data, MarginalOracle)
    assert marginal_futures(plain, [("a",)]) is None and lazy_marginal(plain, ("a",)) is None
    assert marginal_futures(data, [("a",)]) is None  # no client: nothing can stay on a cluster
    np.testing.assert_array_equal(lazy_marginal(data, ("a", "b")).compute(), [[0, 1], [0, 1], [1, 1]])
    got = measure(plain, [("a",), ("b",)], lambda c, mu: int(mu.sum()) * 10 + len(c))
    assert got == {("a",): 41, ("b",): 41} == measure(data, [("a",), ("b",)], lambda c, mu: int(mu.sum()) * 10 + len(c))
