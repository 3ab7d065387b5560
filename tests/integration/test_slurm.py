"""privcube on a real Slurm (``slurm`` fixture: munged, slurmctld, slurmd on this machine, one node).

Both HPC paths run end to end and must give the local seeded run bit for bit (answers, zarr arrays,
ledger): dask-jobqueue workers submitted by ``privcube run`` with ``security: {tls: auto}`` (the
shipped ``deploy/hpc/slurm-job.yaml``, its site-specific keys replaced), and the sbatch runner
``deploy/hpc/privcube-slurm.sbatch`` through ``sbatch --wait``. A submission Slurm refuses fails within
60 s with Slurm's own message on one line; the job-script inspector prints the script Slurm received.
Skipped with the reason where Slurm is not installed or the user is not root.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from slurm_fixture import Slurm, slurm  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
HPC = ROOT / "deploy" / "hpc"
SBATCH = HPC / "privcube-slurm.sbatch"
DOMAIN = {"a": 3, "b": 4, "c": 2}
SEED = "5"


# ------------------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path]:
    """(folder with data, the local seeded run of its job config): the reference every run must equal."""
    folder = tmp_path_factory.mktemp("slurmjob")
    folder.chmod(0o755)
    rng = np.random.default_rng(3)
    n = 3000
    a = rng.integers(0, 3, n)
    frame = pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, n)) % 4, "c": rng.integers(0, 2, n)})
    (folder / "parts").mkdir()
    for i, idx in enumerate(np.array_split(np.arange(n), 3)):
        frame.iloc[idx].to_parquet(folder / "parts" / f"part-{i}.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    config = {"data": {"path": str(folder / "parts"), "domain": str(folder / "domain.json")},
              "mechanism": {"name": "residual-planner"}, "workload": [{"kway": 2}],
              "privacy": {"epsilon": 1.0, "delta": 1.0e-6}}
    (folder / "local.yaml").write_text(yaml.safe_dump(config))
    r = _privcube("run", str(folder / "local.yaml"), "--out", str(folder / "local"), "--seed", SEED, "--quiet")
    assert r.returncode == 0, r.stderr
    return folder, folder / "local"


def _privcube(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The privcube CLI of this interpreter."""
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _config(folder: Path, cluster: dict[str, Any], name: str) -> Path:
    """The local job config with a cluster section."""
    config = yaml.safe_load((folder / "local.yaml").read_text())
    config["cluster"] = cluster
    path = folder / name
    path.write_text(yaml.safe_dump(config))
    return path


def _example_cluster(slurm: Slurm, tmp: Path, **overrides: Any) -> dict[str, Any]:
    """deploy/hpc/slurm-job.yaml's cluster section with its site-specific keys made to fit the test Slurm."""
    cluster = yaml.safe_load((HPC / "slurm-job.yaml").read_text())["cluster"]
    assert cluster["security"] == {"tls": "auto"}  # the shipped example runs encrypted
    for key in ("job_extra_directives", "job_script_prologue"):  # site specific: --constraint, module load
        cluster.pop(key, None)
    cluster.update(queue=slurm.partition, cores=1, processes=1, memory="1GB", jobs=min(2, slurm.cpus),
                   walltime="00:10:00",
                   shared_temp_directory=str(tmp / "certs"), log_directory=str(tmp / "logs"),
                   local_directory=str(tmp / "spill"))
    cluster.update(overrides)
    return cluster


def assert_same_run(a: Path, b: Path) -> None:
    """Two run folders hold the same results: ledger, every answers table, every zarr array."""
    assert json.loads((a / "ledger.json").read_text()) == json.loads((b / "ledger.json").read_text())
    index = json.loads((a / "answers" / "index.json").read_text())
    assert index == json.loads((b / "answers" / "index.json").read_text())
    assert len(index["groups"]) == 3
    for g in index["groups"]:
        pd.testing.assert_frame_equal(pd.read_parquet(a / "answers" / g["file"]),
                                      pd.read_parquet(b / "answers" / g["file"]), check_exact=True)
    import zarr

    za, zb = zarr.open_group(str(a / "store.zarr"), mode="r"), zarr.open_group(str(b / "store.zarr"), mode="r")
    names = sorted(k for k, _ in za.arrays())
    assert names == sorted(k for k, _ in zb.arrays()) and len(names) == 15  # estimate, variance, published
    for k in names:
        np.testing.assert_array_equal(za[k][...], zb[k][...], err_msg=k)


def _no_private_leftovers(spill: Path) -> list[str]:
    """Work folders still present under ``spill`` (waits a little: jobs end after the client left)."""
    deadline = time.monotonic() + 30
    while True:
        left = [p.name for p in spill.glob("privcube-*")] if spill.exists() else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


# -------------------------------------------------------------------------------------------- tests
def test_jobqueue_tls_run_equals_local_run(slurm, job, tmp_path):
    """`privcube run` with the shipped Slurm example (tls: auto): two worker jobs over TLS, identical results."""
    folder, local = job
    config = _config(folder, _example_cluster(slurm, tmp_path), "jobqueue.yaml")
    t0 = time.monotonic()
    r = _privcube("run", str(config), "--out", str(tmp_path / "run"), "--seed", SEED, "--quiet")
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert_same_run(tmp_path / "run", local)
    assert "Task exception was never retrieved" not in r.stderr
    assert _no_private_leftovers(tmp_path / "spill") == []  # every job removed its private folder
    assert not list((tmp_path / "certs").glob(".dask-jobqueue.*"))  # the temporary key is gone
    assert slurm.wait_no_jobs(60)
    print(f"jobqueue run on Slurm: {elapsed:.1f} s")


def test_inspector_prints_the_submitted_script_and_passes_fit_the_workers(slurm, job, tmp_path):
    """With the cluster up: the inspector's script is the one Slurm received (scontrol write batch_script),
    the first worker is there on entry (memory-aware pass sizing sees its limit and refuses a marginal no
    worker can hold), its work folder is private and its dashboard, like the scheduler's, on loopback."""
    from privcube.core.domain import Domain
    from privcube.core.errors import MemoryLimitError
    from privcube.graphs.cluster import hpc
    from privcube.graphs.cluster.handle import resolve_cluster, worker_resources
    from privcube.graphs.marginals import fit_passes

    folder, _ = job
    cluster = _example_cluster(slurm, tmp_path, jobs=1, memory="512MB")
    config = _config(folder, cluster, "inspect.yaml")
    handle = resolve_cluster(cluster)
    with handle as client:
        limit, threads = worker_resources(client)  # no waiting here: the handle waited for the worker
        assert limit is not None and 0 < limit <= 512e6 and threads == 1
        with pytest.raises(MemoryLimitError, match=r"\('a', 'b'\)"):
            fit_passes(Domain(["a", "b"], [4000, 4000]), [("a", "b")], client, split_every=8)

        # (no reference to the job object is kept: dask-jobqueue's close asserts on jobs still referenced)
        (job_id,) = [str(j.job_id) for j in handle.cluster.workers.values()]
        submitted = slurm.run("scontrol", "write", "batch_script", job_id, "-").stdout
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert hpc.main([str(config)]) == 0
        printed = buf.getvalue()
        # the only differences allowed: the scheduler address and the random part of the temporary key files
        expected = printed.replace(hpc.TLS_PLACEHOLDER_ADDRESS, handle.cluster.scheduler_address)
        expected = re.sub(r"(\.dask-jobqueue\.worker\.\w+?)\.XXXXXXXX", r"\1.RANDOM", expected)
        actual = re.sub(r"(\.dask-jobqueue\.worker\.\w+?)\.[\w-]{8}\b", r"\1.RANDOM", submitted)
        assert actual.rstrip("\n") == expected.rstrip("\n")
        assert "--protocol tls://" in actual and "--tls-key" in actual

        info = client.run(lambda dask_worker: (dask_worker.local_directory,
                                               [s.getsockname()[0] for s in dask_worker.http_server._sockets.values()]))
        ((local_dir, worker_dash),) = info.values()
        job_dir = Path(local_dir)
        while job_dir.parent != tmp_path / "spill":
            job_dir = job_dir.parent
        assert job_dir.name.startswith(f"privcube-dask-{job_id}-") and (job_dir.stat().st_mode & 0o777) == 0o700
        assert worker_dash and set(worker_dash) == {"127.0.0.1"}
        sched_dash = [s.getsockname()[0] for s in handle.cluster.scheduler.http_server._sockets.values()]
        assert sched_dash and set(sched_dash) == {"127.0.0.1"}
    assert _no_private_leftovers(tmp_path / "spill") == []
    assert slurm.wait_no_jobs(60)


@pytest.mark.parametrize("case", ["bad-partition", "job-dies", "never-starts"])
def test_failed_worker_jobs_fail_fast_with_slurms_message(slurm, job, tmp_path, case):
    """A partition Slurm does not have: sbatch's own error, one line, exit 2, well within 60 s, no run
    folder. Jobs that die before a worker joins (no such python on the node): one line naming them. Jobs
    that never start (held): one line after cluster.startup_timeout."""
    folder, _ = job
    overrides = {"bad-partition": {"queue": "normal"}, "job-dies": {"python": str(tmp_path / "no-python")},
                 "never-starts": {"job_extra_directives": ["--hold"], "startup_timeout": 3}}[case]
    config = _config(folder, _example_cluster(slurm, tmp_path, jobs=1, **overrides), "bad.yaml")
    t0 = time.monotonic()
    r = _privcube("run", str(config), "--out", str(tmp_path / "run"), timeout=120)
    elapsed = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    if case == "bad-partition":
        assert re.fullmatch(r"privcube: error: cluster \(slurm\): sbatch refused the worker job: "
                            r"sbatch: error: invalid partition specified: normal; .*", lines[0]), lines[0]
    elif case == "job-dies":
        assert re.fullmatch(r"privcube: error: cluster \(slurm\): every worker job ended before a worker joined "
                            r"\(\d+ (COMPLETED|FAILED|ENDED)\); see their output in .*logs", lines[0]), lines[0]
    else:
        assert re.fullmatch(r"privcube: error: cluster \(slurm\): no worker joined within 3 s of submitting the "
                            r"jobs \(jobs \d+ still queued\?\); raise cluster.startup_timeout or check the queue",
                            lines[0]), lines[0]
    assert elapsed < 60, elapsed
    assert not (tmp_path / "run").exists()
    assert slurm.wait_no_jobs(60)
    print(f"{case}: failed in {elapsed:.1f} s")


def _tls_files(folder: Path) -> dict[str, str]:
    """A CA certificate and a node certificate/key in PEM files (one pair for every role)."""
    from distributed import Security

    sec = Security.temporary()
    folder.mkdir(mode=0o700)
    paths = {}
    for key, name, pem in (("ca_file", "ca.pem", sec.tls_ca_file), ("cert", "node.pem", sec.tls_worker_cert),
                           ("key", "node.key", sec.tls_worker_key)):
        (folder / name).write_text(pem)
        (folder / name).chmod(0o600)
        paths[key] = str(folder / name)
    return paths


def test_sbatch_runner_under_sbatch_wait_equals_local_run(slurm, job, tmp_path):
    """privcube-slurm.sbatch as a real batch job (2 tasks, TLS files from the config): the python is found
    without PRIVCUBE_PYTHON, the results equal the local run, the job log has no srun error, and every
    worker's private spill folder is gone."""
    folder, local = job
    config = _config(folder, {"security": {"tls": _tls_files(tmp_path / "tls")}}, "sbatch.yaml")
    env = {k: v for k, v in os.environ.items() if k != "PRIVCUBE_PYTHON"}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",  # as with an activated venv
               PRIVCUBE_SHARED_DIR=str(tmp_path / "shared"), PRIVCUBE_LOCAL_DIR=str(tmp_path / "spill"),
               SLURM_CONF=str(slurm.conf))
    out = tmp_path / "run"
    t0 = time.monotonic()
    tasks = min(2, slurm.cpus)  # one worker per CPU of the test node
    r = subprocess.run(["sbatch", "--wait", "--parsable", f"--partition={slurm.partition}", "--nodes=1",
                        f"--ntasks={tasks}", "--cpus-per-task=1", "--mem-per-cpu=500M",
                        "--time=00:10:00", f"--output={tmp_path / 'job.out'}", str(SBATCH), str(config), str(out),
                        "--seed", SEED, "--quiet"], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    elapsed = time.monotonic() - t0
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert r.returncode == 0, f"{r.stderr}\n{log}"
    assert f"{tasks} workers ready" in log and "(slurm, TLS)" in log
    assert "srun: error" not in log and "Killed" not in log and "Traceback" not in log, log
    assert_same_run(out, local)
    assert _no_private_leftovers(tmp_path / "spill") == []
    assert not list((tmp_path / "shared").glob("scheduler-*.json"))
    info = slurm.run("scontrol", "show", "job", "-o", r.stdout.strip()).stdout
    run_time = re.search(r"RunTime=(\S+)", info)
    print(f"sbatch --wait run: {elapsed:.1f} s (job RunTime {run_time.group(1) if run_time else '?'})")


def test_sbatch_runner_cancelled_leaves_no_spill_folder(slurm, job, tmp_path):
    """scancel of a running privcube-slurm.sbatch job, with the workers up: Slurm signals every task, and
    each worker's task removes its own private spill folder on its node (no srun step after the cancel)."""
    folder, _ = job
    config = _config(folder, {"security": {"tls": _tls_files(tmp_path / "tls")}}, "cancel.yaml")
    # PRIVCUBE_PYTHON is this python, except that `privcube run` waits, so the job is cancelled mid-run
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\n[[ "$1 $2 $3" == "-m privcube run" ]] && sleep 300\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "PRIVCUBE_PYTHON": str(python), "PRIVCUBE_SHARED_DIR": str(tmp_path / "shared"),
           "PRIVCUBE_LOCAL_DIR": str(tmp_path / "spill"), "SLURM_CONF": str(slurm.conf)}
    log = tmp_path / "job.out"
    tasks = min(2, slurm.cpus)
    r = subprocess.run(["sbatch", "--parsable", f"--partition={slurm.partition}", "--nodes=1", f"--ntasks={tasks}",
                        "--cpus-per-task=1", "--mem-per-cpu=500M", "--time=00:10:00", f"--output={log}",
                        str(SBATCH), str(config), str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    deadline = time.monotonic() + 120
    while "workers ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no job output"
        time.sleep(0.5)
    spill = tmp_path / "spill"
    folders = list(spill.glob("privcube-*"))
    assert len(folders) == tasks and all((p.stat().st_mode & 0o777) == 0o700 for p in folders)  # one per worker
    t0 = time.monotonic()
    assert slurm.run("scancel", job_id).returncode == 0
    assert slurm.wait_no_jobs(60)
    assert _no_private_leftovers(spill) == []
    assert not (tmp_path / "run").exists()
    print(f"cancelled job cleaned up in {time.monotonic() - t0:.1f} s")
