"""A real scheduler-file deployment on loopback: `dask scheduler`, two `dask worker`s, `privcube run`.

This is the HPC path without a batch system: the test starts the processes itself (127.0.0.1 only,
no dashboards), submits a full job through the CLI with ``--scheduler-file`` and checks the run
directory contract and that the work ran on the workers. Every process it starts is stopped in
teardown (each in its own session, so nanny children go too).
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "deploy" / "hpc" / "privcube-slurm.sbatch"
DOMAIN = {"a": 3, "b": 4, "c": 2}
N_ROWS = 4000


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """Start a process in its own session, output to ``log``."""
    with open(log, "wb") as fh:
        return subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, wait, then SIGKILL whatever is left."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)  # also reaps children that outlived their parent
        except (ProcessLookupError, PermissionError):
            pass
        p.wait(timeout=10)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """An integer-coded dataset in four Parquet files, a domain JSON and a job config."""
    folder = tmp_path_factory.mktemp("sfdata")
    rng = np.random.default_rng(11)
    a = rng.integers(0, 3, N_ROWS)
    b = (a + rng.integers(0, 2, N_ROWS)) % 4
    c = (rng.random(N_ROWS) < 0.3).astype(np.int64)
    frame = pd.DataFrame({"a": a, "b": b, "c": c})
    (folder / "parts").mkdir()
    for i, idx in enumerate(np.array_split(np.arange(N_ROWS), 4)):
        frame.iloc[idx].to_parquet(folder / "parts" / f"part-{i}.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    config = {
        "data": {"path": "parts", "domain": "domain.json"},  # relative to the config's folder
        "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 2}],
        "privacy": {"epsilon": 1, "delta": 1e-6},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(config))
    return folder, frame


@pytest.fixture(scope="module")
def scheduler_file(tmp_path_factory) -> Iterator[Path]:
    """A running `dask scheduler --scheduler-file F` with two `dask worker --scheduler-file F`."""
    from distributed import Client

    folder = tmp_path_factory.mktemp("sfcluster")
    sched_file = folder / "scheduler.json"
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_start([sys.executable, "-m", "dask", "scheduler", "--scheduler-file", str(sched_file),
                             "--host", "127.0.0.1", "--port", "0", "--no-dashboard"], folder / "scheduler.log"))
        deadline = time.monotonic() + 60
        while not (sched_file.exists() and sched_file.stat().st_size):
            assert procs[0].poll() is None, (folder / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "no scheduler file after 60 s"
            time.sleep(0.2)
        for i in range(2):
            procs.append(_start([sys.executable, "-m", "dask", "worker", "--scheduler-file", str(sched_file),
                                 "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
                                 "--memory-limit", "1GB", "--local-directory", str(folder / f"w{i}")],
                                folder / f"worker{i}.log"))
        with Client(scheduler_file=str(sched_file), timeout="60s") as client:
            client.wait_for_workers(2, timeout=90)
            address = client.scheduler.address
        assert address.startswith("tcp://127.0.0.1:")
        yield sched_file
    finally:
        _stop(procs[1:])
        _stop(procs[:1])


def _executed(sched_file: Path) -> dict[str, int]:
    """Tasks each worker has executed so far."""
    from distributed import Client

    with Client(scheduler_file=str(sched_file), timeout="30s") as client:
        return client.run(lambda dask_worker: dask_worker.state.executed_count)


def test_cli_run_through_scheduler_file(dataset, scheduler_file, tmp_path):
    folder, frame = dataset
    before = _executed(scheduler_file)
    assert len(before) == 2
    out = tmp_path / "run"
    # the config names another cluster (nothing listens there): the --scheduler-file flag overrides it
    job = yaml.safe_load((folder / "job.yaml").read_text())
    job["cluster"] = {"type": "address", "address": "tcp://127.0.0.1:9"}
    job["data"] = {"path": str(folder / "parts"), "domain": str(folder / "domain.json")}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    r = subprocess.run([sys.executable, "-m", "privcube", "run", str(config), "--out", str(out),
                        "--scheduler-file", str(scheduler_file), "--seed", "5", "--quiet"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"privcube run failed:\n{r.stdout}\n{r.stderr}"
    assert f"outputs: {out}" in r.stdout

    # the counting ran on the cluster's workers, not in the client process
    after = _executed(scheduler_file)
    assert sum(after.values()) > sum(before.values())

    # run directory contract
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["spent"]["epsilon"] <= 1 + 1e-9 and ledger["spent"]["delta"] <= 1e-6
    assert ledger["spent"]["rho"] > 0 and ledger["charges"]
    report = json.loads((out / "report.json").read_text())
    assert report["mechanism"] == "residual-planner"
    assert report["sizes"]["partitions"] == 4 and report["sizes"]["groups"] == 3
    index = json.loads((out / "answers" / "index.json").read_text())
    groups = index["groups"]
    assert sorted(tuple(g["attributes"]) for g in groups) == [("a", "b"), ("a", "c"), ("b", "c")]
    for g in groups:
        attrs = g["attributes"]
        table = pd.read_parquet(out / "answers" / g["file"])
        assert list(table.columns[:2]) == attrs and {"estimate", "variance"} <= set(table.columns)
        assert len(table) == g["rows"] == DOMAIN[attrs[0]] * DOMAIN[attrs[1]]
        truth = frame.groupby(attrs).size()
        exact = np.array([truth.get((row[0], row[1]), 0) for row in table[attrs].itertuples(index=False)])
        sd = np.sqrt(table["variance"].to_numpy())
        assert np.all(sd > 0) and np.all(np.abs(table["estimate"].to_numpy() - exact) < 6 * sd)
    assert (out / "config.yaml").exists()


@pytest.mark.slow
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_sbatch_runner_script_local_mode(dataset, tmp_path, tls):
    """deploy/hpc/privcube-slurm.sbatch end to end without Slurm (PRIVCUBE_LAUNCHER=local, loopback); with
    `security.tls` files in the config, scheduler and workers use them too and every link is tls://."""
    folder, _ = dataset
    out = tmp_path / "run"
    config = folder / "job.yaml"
    if tls:
        from distributed import Security

        sec = Security.temporary()
        certs = tmp_path / "certs"
        certs.mkdir()
        for name, pem in (("ca.pem", sec.tls_ca_file), ("node.pem", sec.tls_worker_cert),
                          ("node.key", sec.tls_worker_key)):
            (certs / name).write_text(pem)
        job = yaml.safe_load(config.read_text())
        job["data"] = {"path": str(folder / "parts"), "domain": str(folder / "domain.json")}
        job["cluster"] = {"security": {"tls": {"ca_file": "certs/ca.pem", "cert": "certs/node.pem",
                                               "key": "certs/node.key"}}}  # relative to the config
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump(job))
    env = {**os.environ, "PRIVCUBE_LAUNCHER": "local", "PRIVCUBE_PYTHON": sys.executable,
           "PRIVCUBE_WORKERS": "2", "PRIVCUBE_SHARED_DIR": str(tmp_path / "shared"),
           "PRIVCUBE_LOCAL_DIR": str(tmp_path / "spill")}
    p = subprocess.Popen(["bash", str(SBATCH), str(config), str(out), "--quiet"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        stdout, _ = p.communicate(timeout=300)
    finally:
        _stop([p])
    assert p.returncode == 0, stdout
    assert "2 workers ready" in stdout and ("(local, TLS)" in stdout) == tls
    assert (out / "ledger.json").exists() and (out / "answers" / "index.json").exists()
    assert (out / "report.json").exists()
    assert not list((tmp_path / "shared").glob("scheduler-*.json"))  # cleaned up on exit
    assert (tmp_path / "spill").is_dir() and not list((tmp_path / "spill").iterdir())  # spill space removed
    assert stat.S_IMODE(out.stat().st_mode) == 0o700  # umask 077 in the script, on top of privcube's own
