"""Test-session settings and the fixtures every folder shares.

Tests are laid out by kind: ``unit/`` (functions and classes, no run), ``integration/`` (runs, the CLI, clusters,
files), ``papers/`` (the papers' printed tables and examples). ``support/`` holds what they share (generated jobs,
fault tools, the papers' workload tables); it is put on ``sys.path`` here, so a test says ``from relational_files
import ...``.

One BLAS thread per process:

The suite runs LocalCluster worker processes and cvxpy/numpy solves side by side on small machines;
multi-threaded BLAS then oversubscribes the cores and small dense solves slow down by an order of
magnitude. Environment variables cover processes started later (workers, CLI subprocesses);
threadpoolctl covers the libraries already loaded in this process.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

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


@pytest.fixture(scope="module")
def two_worker_client() -> Iterator:
    """One in-process LocalCluster (2 workers x 1 thread) and its Client for a test module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.fixture()
def single_table_job(tmp_path: Path) -> Callable:
    """The job factory: ``single_table_job(mechanism=, synthesize=, workload=, cluster=)`` writes generated
    people and a job config under ``tmp_path``; returns ``(config path, rows)``."""
    from single_table_job import write_job

    return partial(write_job, tmp_path)


@pytest.fixture(scope="module")
def ml() -> dict:
    """A MovieLens-shaped generated relational data set (users x movies)."""
    from privcube.relational.example_data import movielens_like

    return movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)


@pytest.fixture(scope="module")
def pc() -> dict:
    """A parent/child generated relational data set (one-to-many)."""
    from privcube.relational.example_data import parent_child_like

    return parent_child_like(n_parents=60, n_children=240, d_max=10, seed=2)


@pytest.fixture()
def main_cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Callable:
    """``privcube ARGS`` through the CLI's main in this process (faster than a subprocess):
    ``main_cli(*args, cwd=None) -> CompletedProcess`` with the exit code and the captured output."""
    import subprocess

    from privcube.cli import main

    def call(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        capsys.readouterr()
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return call
