"""#8 on a cluster: AIM+GReM never brings an exact marginal back to the driver.

On a 2-process LocalCluster with a ``DataOracle`` over a dask frame, the exact W↓ marginals come from
the data pass as futures, are attached to the estimate shards on the workers, and selection scores and
measurement noise are computed there. Every object the client receives from the workers is recorded
(``Client._gather`` is what both ``gather`` and ``Future.result`` await) and searched: no integer
array, no array equal to an exact marginal, no planted count, no shard object. The driver-side exact
paths (``DataOracle.marginals``/``prefetch``, ``compute_marginals``) are made to fail. The seeded result
must equal the in-memory run bit for bit. A positive control shows the search catches a gathered
exact marginal.
"""
from __future__ import annotations

import itertools
import os

import numpy as np
import pandas as pd
import pytest

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.mechanisms.aim_grem.grem import LocalMarginals, residual_subsets
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.graphs.execution import run_context
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.workload import Workload

distributed = pytest.importorskip("distributed")
dd = pytest.importorskip("dask.dataframe")

DOM = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
PLANTED = 7919   # exact count of the cell a=2, b=3 (and of a=2)
TOTAL = 12007    # rows: the exact 0-way marginal
BUDGET = PrivacyBudget.from_rho(0.5)


def planted_frame() -> pd.DataFrame:
    rng = np.random.default_rng(23)
    m = TOTAL - PLANTED
    a = rng.integers(0, 2, m)
    b = (a + rng.integers(0, 3, m)) % 4
    rest = pd.DataFrame({"a": a, "b": b, "c": rng.integers(0, 2, m), "d": (b + rng.integers(0, 2, m)) % 5})
    planted = pd.DataFrame({"a": 2, "b": 3, "c": rng.integers(0, 2, PLANTED), "d": rng.integers(0, 5, PLANTED)})
    return pd.concat([rest, planted], ignore_index=True).sample(frac=1.0, random_state=4).reset_index(drop=True)


def exact_marginals(frame: pd.DataFrame) -> dict[tuple[str, ...], np.ndarray]:
    oracle = ArrayOracle.from_frame(DOM, frame)
    cliques = [c for k in range(len(DOM) + 1) for c in itertools.combinations(DOM.attributes, k)]
    return oracle.marginals(cliques)


def leaks(obj, truth, where: str = "result") -> list[str]:  # noqa: ANN001
    """Exact information in an object received from the workers (recursively)."""
    found: list[str] = []
    if isinstance(obj, LocalMarginals):
        return [f"{where}: a marginal shard (holds the exact marginals)"]
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += leaks(v, truth, f"{where}[{k!r}]")
        return found
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found += leaks(v, truth, f"{where}[{i}]")
        return found
    if isinstance(obj, (int, float, np.generic)) and not isinstance(obj, bool):
        return [f"{where}: the count {obj!r}"] if float(obj) in (PLANTED, TOTAL) else []
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "iub":
            found.append(f"{where}: an integer array {obj.dtype} {obj.shape}")
        if obj.dtype.kind in "iufb":
            if np.any(obj == PLANTED) or np.any(obj == TOTAL):
                found.append(f"{where}: holds a planted count")
            for c, m in truth.items():
                if obj.shape == m.shape and np.array_equal(obj.astype(float), m.astype(float)):
                    found.append(f"{where}: equals the exact marginal on {c}")
        return found
    return found


def arrays_in(obj) -> list[np.ndarray]:  # noqa: ANN001
    """Every ndarray inside nested lists/tuples/dicts."""
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [a for x in obj for a in arrays_in(x)]
    return []


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  memory_limit="1GiB") as lc, distributed.Client(lc) as client:
        yield client


def test_driver_receives_only_noisy_arrays_and_scores(cluster, monkeypatch, gathered):
    from privcube.graphs import marginals as gm

    client = cluster
    frame = planted_frame()
    truth = exact_marginals(frame)
    assert (truth[("a", "b")] == PLANTED).sum() == 1 and int(truth[()]) == TOTAL
    workload = Workload.kway(DOM, 2)
    params = {"distribute_min_cells": 1}

    # reference: the in-memory path (exact marginals in this process, no client)
    ref_ledger = PrivacyLedger(BUDGET)
    ref = AIMGReM(params).run(ArrayOracle.from_frame(DOM, frame), workload, BUDGET, ref_ledger, NoiseSource(7))

    oracle = gm.DataOracle(dd.from_pandas(frame, npartitions=3), DOM, client=client)

    def forbidden(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("an exact marginal was requested on the driver")

    monkeypatch.setattr(gm.DataOracle, "marginals", forbidden)
    monkeypatch.setattr(gm.DataOracle, "prefetch", forbidden)
    monkeypatch.setattr(gm, "compute_marginals", forbidden)

    received = gathered  # from here on (conftest's `gathered` records every gather)
    received.clear()
    ledger = PrivacyLedger(BUDGET)
    res = AIMGReM(params).run(oracle, workload, BUDGET, ledger, NoiseSource(7), run_context(client))

    # the search sees everything the workers sent, and that includes the noisy measurements
    assert len(received) >= 3 * res.report["rounds"]
    shapes = {a.shape for a in arrays_in(received)}
    assert DOM.shape_of(("a",)) in shapes and DOM.shape_of(("a", "b")) in shapes  # the noisy 1-way marginals of the initialisation came back
    found = [f for i, r in enumerate(received) for f in leaks(r, truth, f"gather {i}")]
    assert not found, found[:5]

    # same seeded result as the in-memory path, bit for bit
    assert res.report["trace"] == ref.report["trace"]
    assert ledger.charges == ref_ledger.charges
    for a, b in zip(res.answers, ref.answers):
        assert np.array_equal(a.estimate, b.estimate)
        assert np.array_equal(a.variance, b.variance)

    # positive control: gathering an exact marginal is caught by the same search
    received.clear()
    fut = oracle.marginal_futures([("a", "b")])[("a", "b")]
    fut.result()
    fut.release()
    caught = [f for r in received for f in leaks(r, truth)]
    assert any("exact marginal on ('a', 'b')" in f for f in caught) and any("planted" in f for f in caught)


def test_noise_is_drawn_on_the_workers(cluster):
    """The measurement task runs in a worker process, next to the exact marginal, not in the driver."""
    from privcube.graphs.lazy_update import DistributedMarginals

    client = cluster
    truth = {c: np.arange(DOM.size(c), dtype=np.int64).reshape(DOM.shape_of(c)) for c in [("a",), ("a", "b")]}
    futs = {c: client.scatter(v) for c, v in truth.items()}
    table = DistributedMarginals(client, DOM, list(truth), None, truth_futures=futs, shard=LocalMarginals,
                                 subsets=residual_subsets)
    try:
        noise = NoiseSource(3)
        ys = table.noisy([(("a", "b"), ("k", 1), 2.0), (("a",), ("k", 2), 0.5)], noise)
        for (c, key, s), y in zip([(("a", "b"), ("k", 1), 2.0), (("a",), ("k", 2), 0.5)], ys):
            assert np.array_equal(y, truth[c] + noise.gaussian(key, truth[c].shape, s))  # keyed: same draws
        pids = client.run(os.getpid)
        assert os.getpid() not in pids.values()
        where = client.submit(lambda shard: os.getpid(), table._futures[table._shard_of[("a", "b")]]).result()
        assert where in pids.values()
    finally:
        table.close()


@pytest.mark.parametrize("address, remote", [
    ("tls://10.1.2.3:8786", True), ("tcp://scheduler.svc:8786", True), ("tcp://[2001:db8::1]:8786", True),
    ("tcp://127.0.0.1:8786", False), ("tls://localhost:8786", False), ("inproc://10.0.0.1/1/1", False),
])
def test_remote_cluster_keeps_exact_marginals_on_workers_whatever_the_size(address, remote):
    """Against a scheduler off this machine's loopback, even a tiny AIM+GReM problem runs sharded."""
    from types import SimpleNamespace

    mech = AIMGReM({})
    client = SimpleNamespace(scheduler=SimpleNamespace(address=address))
    tiny = SimpleNamespace(cells_kept=10)
    assert mech._distributed(tiny, run_context(client)) is remote
    assert mech._distributed(tiny, RunContext(client=None)) is False
    big = SimpleNamespace(cells_kept=mech.params["distribute_min_cells"])
    assert mech._distributed(big, run_context(client)) is True
