"""Admission control (issue 33, item 5): a job's peak memory is estimated from its plan before any data is
read and refused in one line when it does not fit; ``plan`` prints the estimate; ``--workers`` is bounded
by what the machine holds."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.admission import plan_memory, planned_layout, refusal
from privcube.config import load_config
from privcube.core.errors import ConfigError, MemoryLimitError
from privcube.core.machine import available_memory, cores
from privcube.memory_plan import (
    ANSWER_BYTES,
    DRIVER_BASE,
    F64,
    Layout,
    estimate_peak,
    group_rows,
    postprocess_bytes,
)

GiB = 2**30


def cli(*args: str, limit_bytes: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m privcube ARGS`` in a child process, optionally under an address-space rlimit."""
    def cap() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap)


def job_file(folder: Path, domain: dict[str, int], rows: int = 50, cluster: object = "threads",
             **extra: object) -> Path:
    """A Parquet table of ``rows`` random codes over ``domain`` and a residual-planner all-2-way job on it."""
    rng = np.random.default_rng(5)
    data = folder / "data.parquet"
    pd.DataFrame({a: rng.integers(0, n, rows) for a, n in domain.items()}).to_parquet(data, index=False)
    cfg = {"data": {"path": str(data)}, "domain": domain, "mechanism": {"name": "residual-planner"},
           "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": cluster, **extra}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


BIG = {f"a{i}": 15_000 for i in range(6)}  # issue 33 item 5: 15 marginals of 2.25e8 cells, 3.4e9 cells in all


def test_six_attributes_of_15000_values_all_2way_is_refused_at_once_without_allocating(tmp_path):
    """The issue's job (today it grows at ~2 GB/s until the machine runs out): exit 2 and one line naming what
    it needs and what is available, within seconds, under a 2 GiB address-space limit (a single 2.25e8-cell
    marginal, 1.7 GiB as int64, would not even be counted under it), nothing written."""
    cfg = job_file(tmp_path, BIG)
    out = tmp_path / "run"
    t0 = time.monotonic()
    r = cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet", limit_bytes=2 * GiB)
    seconds = time.monotonic() - t0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("privcube: error: memory: this job needs about ") and " GiB" in line, line
    assert "available" in line and "fewer or smaller marginals" in line, line
    need = float(line.split("needs about ")[1].split()[0])
    assert need > 100 and line.split("needs about ")[1].split()[1] == "GiB", line  # 3.4e9 cells: hundreds of GiB
    assert seconds < 30, seconds
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet", "job.yaml"]


def test_the_same_job_on_a_local_cluster_is_refused_before_the_cluster_starts(tmp_path):
    """On a LocalCluster the driver and every worker together are compared with the machine's memory, before
    any worker process exists."""
    cfg = job_file(tmp_path, BIG, cluster={"type": "local", "n_workers": 2})
    out = tmp_path / "run"
    t0 = time.monotonic()
    r = cli("run", str(cfg), "--out", str(out), "--quiet", limit_bytes=2 * GiB)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "for the driver and 2 workers" in lines[0], r.stderr
    assert time.monotonic() - t0 < 30
    assert not out.exists()


def test_python_api_refuses_the_same_job_with_memory_limit_error(tmp_path):
    cfg = job_file(tmp_path, BIG)
    with pytest.raises(MemoryLimitError, match=r"^memory: this job needs about .* GiB at its peak .* available"):
        api.run(str(cfg), tmp_path / "run", seed=1, quiet=True)
    assert not (tmp_path / "run").exists()


def test_plan_prints_the_estimate_text_and_json(tmp_path):
    """``plan`` shows the peak and its largest step (text and --json) and says a run would be refused."""
    cfg = job_file(tmp_path, BIG)
    r = cli("plan", str(cfg))
    assert r.returncode == 0, r.stderr
    mem_lines = [ln for ln in r.stdout.splitlines() if ln.startswith("memory: ")]
    assert len(mem_lines) == 1, r.stdout
    assert "GiB at peak (largest step: write" in mem_lines[0] and "a run would be refused" in mem_lines[0]
    r = cli("plan", str(cfg), "--json")
    mem = json.loads(r.stdout)["memory"]
    assert mem["fits"] is False and mem["refusal"].startswith("memory: this job needs about")
    assert mem["largest_step"]["name"] == "write" and mem["largest_step"]["bytes"] == mem["peak_bytes"]
    cells = 15 * 15_000**2
    assert mem["peak_bytes"] > ANSWER_BYTES * cells  # at least the answers themselves (estimate + variance)
    assert {s["name"] for s in mem["steps"]} == {"count", "measure", "answers", "postprocess", "write"}


def test_plan_of_a_small_job_fits_and_is_dominated_by_the_process_itself(tmp_path):
    cfg = job_file(tmp_path, {"a": 4, "b": 3, "c": 5})
    mem = json.loads(cli("plan", str(cfg), "--json").stdout)["memory"]
    assert mem["fits"] is True and "refusal" not in mem
    assert DRIVER_BASE <= mem["peak_bytes"] < DRIVER_BASE + 200 * 2**20
    assert mem["workers"] == 0 and mem["cluster"] == "in-process"
    assert "available_bytes" not in mem  # the plan of a job does not change with the machine's load


def test_a_job_that_fits_still_runs(tmp_path):
    cfg = job_file(tmp_path, {"a": 40, "b": 30, "c": 5}, rows=500)
    res = api.run(str(cfg), tmp_path / "run", seed=1, quiet=True)
    assert (res.out_dir / ".complete").exists()


def test_estimate_parts_follow_the_workload(tmp_path):
    """The answers, post-processing and write steps grow with the workload's cells; counts are exact."""
    small = load_config(job_file(tmp_path, {"a": 100, "b": 100, "c": 100}))
    assert [group_rows(g, small.domain) for g in small.workload] == [10_000] * 3
    est = estimate_peak(small, layout=Layout(threads=2), partitions=(0, 1))
    steps = {s.name: s for s in est.steps}
    assert steps["answers"].driver - DRIVER_BASE >= ANSWER_BYTES * 30_000
    assert steps["postprocess"].driver - DRIVER_BASE >= postprocess_bytes(30_000, 4 * 30_000, method="pgm",
                                                                          model_cells=10**6)
    big = load_config(job_file(tmp_path, {"a": 1000, "b": 1000, "c": 1000}))
    est_big = estimate_peak(big, layout=Layout(threads=2), partitions=(0, 1))
    big_steps = {s.name: s for s in est_big.steps}
    for name in ("answers", "write"):  # 100x the cells: far more than 50x the variable part
        assert big_steps[name].driver - DRIVER_BASE > 50 * (steps[name].driver - DRIVER_BASE)
    # post-processing's model is bounded by its public size (postprocess.model_cells), not by the cells
    assert big_steps["postprocess"].driver - DRIVER_BASE < 100 * (steps["postprocess"].driver - DRIVER_BASE)
    assert postprocess_bytes(10**6, 4 * 10**6) == int(18 * F64 * 10**6 + 44 * 4 * 10**6)


def test_query_rows_are_counted_without_forming_matrices(tmp_path):
    """allrange over 15,000 codes has 112,507,500 queries; counting them must not build the matrix."""
    cfg = load_config({"domain": {"x": 15_000, "y": 3}, "mechanism": "hdmm", "privacy": {"epsilon": 1.0},
                       "workload": [{"attributes": ["x", "y"], "queries": {"x": "allrange", "default": "identity"}},
                                    {"attributes": ["x"], "queries": "prefix"}]}, need_data=False)
    assert [group_rows(g, cfg.domain) for g in cfg.workload] == [15_000 * 15_001 // 2 * 3, 15_000]


def test_worker_memory_limit_refused_before_the_local_cluster_starts(tmp_path):
    """A LocalCluster whose workers cannot hold the count of a 2,000 x 2,000 marginal: one line naming the
    per-worker need, the limit and the marginal; no worker started (it returns in seconds)."""
    cfg = job_file(tmp_path, {"a": 2000, "b": 2000},
                   cluster={"type": "local", "n_workers": 1, "memory_limit": "300MiB"})
    t0 = time.monotonic()
    r = cli("run", str(cfg), "--out", str(tmp_path / "run"), "--quiet")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "each dask worker needs about" in lines[0] and "memory limit of 300 MiB" in lines[0]
    assert "['a', 'b']" in lines[0] and "cluster.memory_limit" in lines[0]
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "run").exists()


def test_connected_cluster_is_asked_for_its_workers_memory(tmp_path):
    """A scheduler privcube does not start (--scheduler-address): its workers' memory limits, as the scheduler
    reports them, are checked once the client is connected, before any data is read; the API's ``client=``
    too."""
    distributed = pytest.importorskip("distributed")
    cfg = job_file(tmp_path, {"a": 2000, "b": 2000}, cluster="threads")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="300MiB",
                                  protocol="tcp://", host="127.0.0.1", dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        with pytest.raises(MemoryLimitError, match=r"each dask worker needs about .*memory limit of 300 MiB"):
            api.run(str(cfg), tmp_path / "a", seed=1, quiet=True, client=client)
        with pytest.raises(MemoryLimitError, match=r"each dask worker needs about .*memory limit of 300 MiB"):
            api.run(str(cfg), tmp_path / "b", seed=1, quiet=True, scheduler_address=lc.scheduler_address)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_workers_1000_refused_in_one_line_without_starting_processes(tmp_path):
    """Today ``--workers 1000`` starts 73 processes and ~14 GB in 3 s: refused, naming the bound."""
    cfg = job_file(tmp_path, {"a": 4, "b": 3}, cluster={"type": "local"})
    t0 = time.monotonic()
    r = cli("run", str(cfg), "--out", str(tmp_path / "run"), "--quiet", "--workers", "1000")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("privcube: error: --workers 1000: a LocalCluster on this machine holds at most "), lines
    most = int(lines[0].split("holds at most ")[1].split()[0])
    assert 1 <= most <= 4 * cores() and f"use --workers {most} or fewer" in lines[0], lines
    assert "cluster (none)" not in lines[0]
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "run").exists()
    # with no cluster section (the flag makes it a LocalCluster) and under cluster: threads
    cfg2 = job_file(tmp_path, {"a": 4, "b": 3}, cluster="threads")
    r = cli("run", str(cfg2), "--out", str(tmp_path / "run"), "--quiet", "--workers", "1000")
    assert r.returncode == 2 and "--workers 1000: more threads than this machine can run" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["0", "-3"])
def test_workers_not_positive_names_the_flag_not_cluster_none(tmp_path, value):
    raw = yaml.safe_load(job_file(tmp_path, {"a": 4, "b": 3}).read_text())
    raw.pop("cluster")
    cfg = tmp_path / "nocluster.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    r = cli("run", str(cfg), "--out", str(tmp_path / "run"), "--quiet", "--workers", value)
    assert r.returncode == 2
    assert r.stderr.strip() == f"privcube: error: --workers must be a positive integer, got {value}"


def test_config_n_workers_over_the_bound_names_the_key(tmp_path):
    cfg = job_file(tmp_path, {"a": 4, "b": 3}, cluster={"type": "local", "n_workers": 4 * cores() + 1})
    with pytest.raises(ConfigError, match=rf"^cluster.n_workers {4 * cores() + 1}: a LocalCluster on this machine"):
        api.run(str(cfg), tmp_path / "run", quiet=True)


def test_layouts_of_cluster_specs():
    assert planned_layout({"type": "threads", "num_workers": 3}) == Layout(workers=0, threads=3, kind="in-process")
    lay = planned_layout({"type": "local", "n_workers": 2, "memory_limit": "1GiB"})
    assert (lay.workers, lay.threads, lay.worker_limit, lay.kind) == (2, 1, 2**30, "local")
    assert planned_layout({"type": "address", "address": "tcp://10.0.0.1:8786"}).kind == "remote"


def test_refusal_of_a_remote_cluster_compares_the_driver_only(tmp_path):
    """Workers elsewhere: only the driver's part is compared with this machine's memory."""
    cfg = load_config(job_file(tmp_path, {"a": 300, "b": 300}))
    est = estimate_peak(cfg, layout=Layout(workers=64, threads=1, worker_limit=64 * GiB, kind="remote"),
                        partitions=(0, 1))
    assert refusal(est, available=est.driver_peak) is None
    assert refusal(est, available=est.driver_peak - 1).startswith("memory: this job's driver process needs about")


def test_constants_mirror_the_engine():
    """The estimate's copies of engine constants (it must not import the cluster layer) are the engine's."""
    from privcube.graphs import marginals
    from privcube.memory_plan import HDMM_CHUNK_CELLS, PASS_CELLS, PASS_WORKER_FRACTION, POSTPROCESS_FLAT_MAX_CELLS
    from privcube.mechanisms.hdmm.mechanism import HDMM
    from privcube.postprocess.lnn import FLAT_MAX_CELLS

    assert PASS_CELLS == marginals.DEFAULT_PASS_CELLS
    assert PASS_WORKER_FRACTION == marginals.WORKER_MEMORY_FRACTION
    assert POSTPROCESS_FLAT_MAX_CELLS == FLAT_MAX_CELLS
    assert HDMM_CHUNK_CELLS == HDMM.PARAMS["chunk_cells"]


def test_plan_memory_on_a_remote_cluster_has_no_available_figure(tmp_path):
    cfg = load_config(job_file(tmp_path, {"a": 4, "b": 3}, cluster={"type": "address", "address": "tcp://127.0.0.1:1"}))
    mem = plan_memory(cfg)
    assert mem["fits"] is None and mem["cluster"] == "remote" and "refusal" not in mem


def test_machine_figures_are_sane():
    assert cores() >= 1
    assert 0 < available_memory() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
