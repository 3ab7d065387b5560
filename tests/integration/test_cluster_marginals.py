"""Marginal pass on a multi-process LocalCluster (2 workers × 1 thread) and cluster resolution."""
from __future__ import annotations

import itertools
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from reference_counts import groupby_dense
from privcube.core.errors import ConfigError
from privcube.graphs import progress as prog
from privcube.graphs.cluster.handle import resolve_cluster
from privcube.graphs.marginals import DataOracle, compute_marginals

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ADULT = DATA / "adult"


@pytest.fixture(scope="module")
def process_client():
    """One 2-process LocalCluster (1 thread each) for the module, closed afterwards."""
    prog.set_quiet(True)
    with resolve_cluster({"type": "local", "n_workers": 2, "threads_per_worker": 1,
                          "memory_limit": "1GiB"}) as c:
        yield c
    prog.set_quiet(False)


@pytest.fixture(scope="module")
def adult():
    """(dask frame of adult with several partitions, pandas frame, domain)."""
    if not (ADULT / "adult.csv").exists():
        pytest.skip(f"adult data not found at {ADULT} (shared data folder absent)")
    domain = Domain.load(ADULT / "adult-domain.json")
    ddf = dd.read_csv(ADULT / "adult.csv", blocksize=300_000)[list(domain.attributes)]
    pdf = pd.read_csv(ADULT / "adult.csv")[list(domain.attributes)]
    return ddf, pdf, domain


def test_client_has_two_process_workers(process_client):
    """The fixture really is a 2-worker, 1-thread-each process cluster."""
    info = process_client.scheduler_info()
    workers = info["workers"]
    assert len(workers) == 2
    assert all(w["nthreads"] == 1 for w in workers.values())
    assert len({w["id"] for w in workers.values()}) == 2


def test_adult_all_one_two_some_three_way(process_client, adult):
    """All 1-way, all 2-way and a set of 3-way marginals of adult equal pandas on the cluster."""
    ddf, pdf, domain = adult
    attrs = domain.attributes
    three = [("age", "sex", "income>50K"), ("workclass", "education-num", "race"),
             ("marital-status", "relationship", "sex"), ("native-country", "race", "income>50K")]
    cliques = [(a,) for a in attrs] + list(itertools.combinations(attrs, 2)) + three
    res = compute_marginals(ddf, domain, cliques, client=process_client, split_every=3)
    for c in cliques:
        np.testing.assert_array_equal(res[c], groupby_dense(pdf, c, domain.shape_of(c)), err_msg=str(c))


def test_parquet_files_and_weights_on_cluster(process_client, tmp_path):
    """Multi-file Parquet, raw and distinct-compressed (count column), equal pandas on the cluster."""
    domain = Domain.from_mapping({"a": 6, "b": 4, "c": 9})
    rng = np.random.default_rng(7)
    raw = pd.DataFrame({a: rng.integers(0, s, 20_000).astype(np.int8)
                        for a, s in zip(domain.attributes, domain.shape)})
    comp = raw.groupby(list(domain.attributes)).size().rename("count").reset_index()
    for name, frame in (("raw", raw), ("comp", comp)):
        d = tmp_path / name
        d.mkdir()
        for i, part in enumerate(np.array_split(np.arange(len(frame)), 4)):
            frame.iloc[part].to_parquet(d / f"part-{i}.parquet", index=False)
    cliques = [("a",), ("c", "b"), ("a", "b", "c"), ()]
    r_raw = compute_marginals(dd.read_parquet(str(tmp_path / "raw")), domain, cliques, client=process_client)
    r_comp = compute_marginals(dd.read_parquet(str(tmp_path / "comp")), domain, cliques,
                               weight="count", client=process_client)
    for c in cliques:
        expect = groupby_dense(raw, c, domain.shape_of(c))
        np.testing.assert_array_equal(r_raw[c], expect)
        np.testing.assert_array_equal(r_comp[c], expect)


def test_bad_code_error_crosses_the_cluster(process_client):
    """An out-of-domain code found on a worker surfaces as DataError naming the column (never the value)."""
    from privcube.core.errors import DataError

    domain = Domain.from_mapping({"a": 3, "b": 2})
    bad = pd.DataFrame({"a": [0, 1, 2, 0, 1, 2], "b": [0, 1, 0, 1, 5, 0]})
    with pytest.raises(DataError, match=r"column 'b' has a value outside the domain"):
        compute_marginals(dd.from_pandas(bad, npartitions=3), domain, [("a", "b")], client=process_client)


def test_oracle_with_client(process_client, adult):
    """DataOracle with a client answers and caches."""
    ddf, pdf, domain = adult
    o = DataOracle(ddf, domain, client=process_client)
    m = o.marginals([("sex", "income>50K"), ("income>50K",)])
    np.testing.assert_array_equal(m[("sex", "income>50K")], groupby_dense(pdf, ("sex", "income>50K"), (2, 2)))
    np.testing.assert_array_equal(m[("income>50K",)], groupby_dense(pdf, ("income>50K",), (2,)))
    assert o.n_passes == 1


def test_resolve_address_uses_existing_cluster(process_client, adult):
    """type=address (and the CLI override) connects a second Client to the running scheduler."""
    ddf, pdf, domain = adult
    addr = process_client.scheduler.address
    with resolve_cluster({"type": "none"}, scheduler_address=addr) as c2:
        assert c2 is not None and c2.scheduler.address == addr
        res = compute_marginals(ddf, domain, [("race",)], client=c2)
        np.testing.assert_array_equal(res[("race",)], groupby_dense(pdf, ("race",), (5,)))
    with resolve_cluster({"type": "address", "address": addr}) as c3:
        assert len(c3.scheduler_info()["workers"]) == 2
    # the shared cluster survives the second clients closing
    assert process_client.submit(lambda: 41 + 1).result() == 42


def test_resolve_local_creates_and_closes():
    """type=local creates its own processes cluster and closes it on exit."""
    handle = resolve_cluster({"type": "local", "n_workers": 1, "threads_per_worker": 1,
                              "memory_limit": "512MiB"})
    with handle as c:
        assert c.submit(sum, [1, 2, 3]).result() == 6
        cluster = handle.cluster
        assert len(c.scheduler_info()["workers"]) == 1
    assert handle.client is None and handle.cluster is None
    assert cluster.status.name == "closed"


def test_resolve_none_and_threads_and_errors():
    """none/threads yield no process_client; unknown keys/types and later backends raise ConfigError."""
    with resolve_cluster(None) as c:
        assert c is None
    import dask

    with resolve_cluster({"type": "threads", "num_workers": 2}) as c:
        assert c is None and dask.config.get("num_workers") == 2
    assert dask.config.get("num_workers", None) != 2
    with pytest.raises(ConfigError, match="'n_wrkers'"):
        resolve_cluster({"type": "local", "n_wrkers": 2})
    with pytest.raises(ConfigError, match="'bogus'"):
        resolve_cluster({"type": "bogus"})
    # external clusters are validated before anything starts; errors name the key
    with pytest.raises(ConfigError, match="image"):
        resolve_cluster({"type": "kubernetes"})
    with pytest.raises(ConfigError, match="'queue_name'"):
        resolve_cluster({"type": "slurm", "queue_name": "x"})
    # CLI flags win over the config's cluster type (a slurm job runs against its scheduler file)
    h = resolve_cluster({"type": "slurm", "cores": 2, "memory": "4GB"}, scheduler_address="tcp://127.0.0.1:1")
    assert h.type == "address"
    # a plain-tcp, non-loopback scheduler is refused unless allow_insecure is explicit
    with pytest.raises(ConfigError, match="allow_insecure"), \
            resolve_cluster({"type": "address", "address": "tcp://10.1.2.3:8786"}):
        pass
    with pytest.raises(ConfigError, match="'address'"):
        resolve_cluster({"type": "address"})
    with pytest.raises(ConfigError, match="n_workers"):
        resolve_cluster({"type": "local", "n_workers": 0})
    h = resolve_cluster(None, workers=3)
    assert h.type == "local" and h.options["n_workers"] == 3


def test_ingest_and_distinct_compression_integration(process_client, adult):
    """storage.ingest.open_table + storage.distinct.compress feed the pass; counts equal pandas."""
    ingest = pytest.importorskip("privcube.storage.ingest", reason="storage.ingest not built yet")
    distinct = pytest.importorskip("privcube.storage.distinct", reason="storage.distinct not built yet")
    _, pdf, domain = adult
    table = ingest.open_table(ADULT / "adult.csv", domain, blocksize=300_000)
    assert table.frame.npartitions > 1
    comp = distinct.compress(table.frame)
    cliques = [("age", "sex"), ("race", "income>50K", "workclass"), ("hours-per-week",)]
    raw = compute_marginals(table, table.domain, cliques, client=process_client)  # EncodedTable accepted
    weighted = compute_marginals(comp, table.domain, cliques, weight="count", client=process_client)
    for c in cliques:
        expect = groupby_dense(pdf, c, domain.shape_of(c))
        np.testing.assert_array_equal(raw[c], expect)
        np.testing.assert_array_equal(weighted[c], expect)


def test_zarr_dask_write_on_cluster(process_client, tmp_path):
    """A non-aligned dask array is stored intact into a sharded zarr array by cluster workers."""
    import dask.array as da

    from privcube.storage.zarr_store import TensorStore

    x = np.arange(60 * 70, dtype=np.int64).reshape(60, 70)
    ts = TensorStore(tmp_path / "run.zarr")
    with process_client.as_current():
        ts.write("x", da.from_array(x, chunks=(13, 17)), chunks=(5, 7), shards=(10, 35))
    np.testing.assert_array_equal(ts.read("x"), x)


def _noisy_sum(clique, mu):
    """A stand-in release: a deterministic function of the exact marginal (module level: picklable)."""
    return np.asarray(mu, dtype=float).sum(axis=-1) + 0.5


def test_measure_applies_the_release_on_the_workers(process_client):
    """oracle.measure runs fn next to the data: results equal local fn(exact), no exact counts cached."""
    import dask.dataframe as dd

    from privcube.graphs.marginals import DataOracle
    from privcube.core.oracle import ArrayOracle, measure

    rng = np.random.default_rng(5)
    pdf = pd.DataFrame({"a": rng.integers(0, 3, 2000), "b": rng.integers(0, 4, 2000), "c": rng.integers(0, 2, 2000)})
    dom = Domain.from_mapping({"a": 3, "b": 4, "c": 2})
    oracle = DataOracle(dd.from_pandas(pdf, npartitions=4), dom, client=process_client)
    cliques = [("a", "b"), ("b",), ("c", "a")]
    got = measure(oracle, cliques, _noisy_sum)
    local = measure(ArrayOracle(dom, pdf[["a", "b", "c"]].to_numpy()), cliques, _noisy_sum)
    assert got.keys() == local.keys()
    for c in cliques:
        assert np.allclose(got[c], local[c])
    assert oracle._cache == {}  # the exact counts never came back to the process_client


@pytest.mark.parametrize("name", ["residual-planner", "querysmasher", "hdmm"])
def test_batch_mechanisms_measure_on_the_workers(process_client, name):
    """With a process_client, releases run on the workers: same seeded answers as in-process, nothing exact cached."""
    from privcube.mechanisms import get_mechanism
    from privcube.core.oracle import ArrayOracle
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.privacy.noise import NoiseSource
    from privcube.core.workload import parse_workload

    rng = np.random.default_rng(8)
    pdf = pd.DataFrame({"a": rng.integers(0, 3, 1500), "b": rng.integers(0, 4, 1500), "c": rng.integers(0, 2, 1500)})
    dom = Domain.from_mapping({"a": 3, "b": 4, "c": 2})
    wl = parse_workload([{"kway": 2}], dom)
    budget = PrivacyBudget.from_epsilon_delta(1.0, 1e-6)
    remote = DataOracle(dd.from_pandas(pdf, npartitions=3), dom, client=process_client)
    results = []
    for oracle in (remote, ArrayOracle(dom, pdf[["a", "b", "c"]].to_numpy())):
        mech = get_mechanism(name)({})
        results.append(mech.run(oracle, wl, budget, PrivacyLedger(budget), NoiseSource(seed=21)))
    for got, want in zip(*[r.answers for r in results]):
        assert np.allclose(got.estimate, want.estimate)
    assert remote._cache == {}


class _FakeClient:
    """Only what fit_passes reads: the scheduler's worker table."""

    def __init__(self, limits, nthreads):
        self._workers = {f"tcp://w{i}": {"memory_limit": m, "nthreads": nthreads} for i, m in enumerate(limits)}

    def scheduler_info(self, n_workers=-1):
        return {"workers": self._workers}


def test_fit_passes_sizes_passes_to_the_smallest_worker():
    """Fan-in is lowered first, then roots are spread over passes, from the smallest worker limit."""
    from privcube.core.errors import MemoryLimitError
    from privcube.graphs.marginals import fit_passes

    domain = Domain.from_mapping({"a": 10_000, "b": 1_000, "c": 1_000, "d": 2, "e": 20_000})
    fake = _FakeClient([4 * 10**9, 10**9], nthreads=2)   # smallest limit 1e9 bytes: plan with 0.6e9
    # one root of 1e7 cells = 80 MB: a combine of fan-in s plus 2 threads needs 80 MB * (s + 3) <= 600 MB
    ((roots, fan_in),) = fit_passes(domain, [("a", "b")], fake, split_every=8)
    assert roots == [("a", "b")] and fan_in == 4
    # two such roots (160 MB) exceed the per-pass cap of 600 MB / (8 * 5) = 15e6 cells: two passes
    plan = fit_passes(domain, [("a", "b"), ("a", "c")], fake, split_every=8)
    assert sorted(r for p, _ in plan for r in p) == [("a", "b"), ("a", "c")]
    assert len(plan) == 2 and [f for _, f in plan] == [4, 4]
    # small roots keep the requested fan-in and share one pass
    assert fit_passes(domain, [("b",), ("c", "d")], fake, split_every=8) == [([("c", "d"), ("b",)], 8)]
    # 2e7 cells (160 MB) need 160 MB * 5 = 800 MB even at fan-in 2: refused up front, naming the marginal
    with pytest.raises(MemoryLimitError, match=r"marginal on \('a', 'b', 'd'\).*cluster.memory_limit"):
        fit_passes(domain, [("a", "b", "d")], fake, split_every=8)
    # without a process_client (or without limits) only pass_cells applies
    assert fit_passes(domain, [("a", "e")], None, split_every=8) == [([("a", "e")], 8)]
    assert fit_passes(domain, [("a", "e")], _FakeClient([0], 1), split_every=8) == [([("a", "e")], 8)]


def test_passes_fit_real_workers_and_counts_stay_exact(process_client):
    """On 1 GiB workers (plan with 0.6 GiB, 1 thread): large roots are split over two passes with a
    lower fan-in and the counts still equal pandas; a marginal no worker can hold is refused before
    any task runs, through compute_marginals and through the oracle's on-worker measure path."""
    from privcube.core.errors import MemoryLimitError
    from privcube.graphs.marginals import fit_passes

    domain = Domain.from_mapping({"a": 2048, "b": 4096, "c": 2048, "d": 64})
    rng = np.random.default_rng(3)
    pdf = pd.DataFrame({a: rng.integers(0, s, 6_000) for a, s in zip(domain.attributes, domain.shape)})
    ddf = dd.from_pandas(pdf, npartitions=5)
    cliques = [("a", "b"), ("a", "c"), ("b", "c")]   # 2**23, 2**22, 2**23 cells
    # cap = 0.6 GiB / (8 * 4) = 20.1e6 cells < 20.97e6 in total: (a,b)+(b,c) in one pass at fan-in 2
    # (0.6 GiB / 134 MB = 4.8 >= 2 + 2), (a,c) alone at the requested fan-in
    plan = fit_passes(domain, cliques, process_client, split_every=8)
    assert [(sorted(p), f) for p, f in plan] == [([("a", "b"), ("b", "c")], 2), ([("a", "c")], 8)]
    res = compute_marginals(ddf, domain, cliques, client=process_client)
    for c in cliques:
        np.testing.assert_array_equal(res[c], groupby_dense(pdf, c, domain.shape_of(c)), err_msg=str(c))
    # (b, c, d): 2**29 cells = 4 GiB, 16 GiB planned at fan-in 2
    with pytest.raises(MemoryLimitError, match=r"marginal on \('b', 'c', 'd'\)"):
        compute_marginals(ddf, domain, [("b", "c", "d")], client=process_client, max_cells=2**30)
    oracle = DataOracle(ddf, domain, client=process_client, max_cells=2**30)
    with pytest.raises(MemoryLimitError, match=r"marginal on \('b', 'c', 'd'\)"):
        oracle.measure([("b", "c", "d")], lambda c, mu: float(mu.sum()))
    assert process_client.run(lambda: 1)  # the workers are alive
