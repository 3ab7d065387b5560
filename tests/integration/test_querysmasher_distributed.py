"""QuerySmasher part solves scattered through a real distributed Client give the local plan."""
from __future__ import annotations

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from privcube.core.domain import Domain  # noqa: E402
from privcube.graphs.execution import run_context  # noqa: E402
from privcube.mechanisms.querysmasher.mechanism import QuerySmasher  # noqa: E402
from privcube.privacy.budget import PrivacyBudget  # noqa: E402
from privcube.core.workload import parse_workload  # noqa: E402

COST1 = PrivacyBudget(0.5, 1.0, 1e-9)


def test_scatter_matches_local_plan(two_worker_client) -> None:
    dom = Domain(("a", "b", "c", "d"), (4, 5, 6, 3))
    wl = parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "affine"},
                         {"kway": 3, "queries": "prefix"},
                         {"attributes": ["a", "d"], "queries": "abs-diff", "weight": 2}], dom)
    local_sols, local_info = QuerySmasher().optimize(wl, COST1)
    assert local_info["distinct_parts"] > 4  # several independent solves to scatter
    client = two_worker_client
    with distributed.get_task_stream(client) as ts:
        sols, info = QuerySmasher().optimize(wl, COST1, context=run_context(client))
    names = [t["key"] for t in ts.data]
    workers = {t["worker"] for t in ts.data if "querysmasher-solve" in str(t["key"])}
    assert sum("querysmasher-solve" in str(k) for k in names) == info["distinct_parts"]
    assert len(workers) >= 1
    assert info["distinct_parts"] == local_info["distinct_parts"]
    assert list(sols) == list(local_sols)
    for key, x in sols.items():
        y = local_sols[key]
        assert x.L == pytest.approx(y.L, rel=1e-12), key
        assert x.sigma2 == pytest.approx(y.sigma2, rel=1e-12), key
        for p, q in zip(x.parts, y.parts):
            assert p.method == q.method
            np.testing.assert_allclose(p.vpinv, q.vpinv, rtol=1e-10, atol=1e-12)


def test_scatter_factored_parts(two_worker_client) -> None:
    """Parts above dense_limit (factored, low-rank strategies) scatter and come back identical."""
    dom = Domain(("a", "b", "c"), (12, 15, 4))
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": "abs-diff"}], dom)
    params = {"dense_limit": 50}
    local_sols, local_info = QuerySmasher(params).optimize(wl, COST1)
    assert "lowrank" in local_info["methods"]
    client = two_worker_client
    sols, info = QuerySmasher(params).optimize(wl, COST1, context=run_context(client))
    assert info["methods"] == local_info["methods"]
    for key, x in sols.items():
        y = local_sols[key]
        assert x.L == pytest.approx(y.L, rel=1e-12), key
        for p, q in zip(x.parts, y.parts):
            assert (p.vpinv is None) == (q.vpinv is None)
            np.testing.assert_allclose(p.pinv_dense(), q.pinv_dense(), rtol=1e-9, atol=1e-10)
