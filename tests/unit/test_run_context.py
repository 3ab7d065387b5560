"""The one cluster seam: a run context offers generic map/compute/persist/scatter and named kernels."""
from __future__ import annotations

import numpy as np
import pytest

from privcube.core.context import RunContext, local_map, local_scatter


def _weighted_sum(item: tuple) -> float:
    data, k = item
    return float(np.asarray(data).sum()) * k


def test_a_context_without_a_cluster_runs_here_and_has_no_kernels():
    """The defaults are a complete local execution: map in order, scatter is the data itself, no kernel."""
    ctx = RunContext()
    assert ctx.map is local_map and ctx.scatter is local_scatter and ctx.client is None
    data = np.arange(10.0)
    handle = ctx.scatter(data)
    assert handle is data
    assert ctx.map(_weighted_sum, [(handle, 1), (handle, 2)]) == [45.0, 90.0]
    assert ctx.kernel("sharded-marginals") is None and ctx.kernel("chunked-release") is None
    assert ctx.kernel("no-such-kernel") is None


def test_the_driver_fills_the_registered_kernels():
    """run_context offers every kernel of graphs.kernels that can run here: chunked-release without a cluster,
    both with one; a mechanism asks by name."""
    from privcube.graphs.execution import run_context
    from privcube.graphs.kernels import KERNELS

    assert set(KERNELS) == {"sharded-marginals", "chunked-release"}
    local = run_context()
    assert local.kernel("chunked-release") is not None and local.kernel("sharded-marginals") is None


def test_scatter_puts_data_on_the_cluster_once_for_later_maps():
    """A scattered handle passed inside the items of a map reaches each task as the data itself."""
    distributed = pytest.importorskip("distributed")
    from privcube.graphs.execution import run_context

    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        ctx = run_context(client)
        handle = ctx.scatter(np.arange(10.0))
        assert isinstance(handle, distributed.Future)
        assert ctx.map(_weighted_sum, [(handle, 1), (handle, 2), (handle, 3)]) == [45.0, 90.0, 135.0]
        assert ctx.kernel("sharded-marginals") is not None and ctx.kernel("chunked-release") is not None
