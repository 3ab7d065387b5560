"""Test-session settings: one BLAS thread per process.

The suite runs LocalCluster worker processes and cvxpy/numpy solves side by side on small machines;
multi-threaded BLAS then oversubscribes the cores and small dense solves slow down by an order of
magnitude. Environment variables cover processes started later (workers, CLI subprocesses);
threadpoolctl covers the libraries already loaded in this process.
"""
from __future__ import annotations

import os

import pytest

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(1)


@pytest.fixture()
def gathered(monkeypatch: pytest.MonkeyPatch) -> list:
    """Everything a dask Client gathers to this process during the test, in order (records, changes nothing)."""
    distributed = pytest.importorskip("distributed")
    received: list = []
    real_gather = distributed.Client._gather

    async def recording_gather(self, futures, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = await real_gather(self, futures, *args, **kwargs)
        received.append(out)
        return out

    monkeypatch.setattr(distributed.Client, "_gather", recording_gather)
    return received
