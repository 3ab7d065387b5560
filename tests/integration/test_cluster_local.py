"""The LocalCluster privcube starts: sized to the machine, private spill folder, CLI flags override.

Workers spill exact partial counts to disk under memory pressure, so every LocalCluster started by
``resolve_cluster`` works in an owner-only (0o700) scratch folder that is deleted when the cluster
closes -- on errors too -- and a folder left by a killed driver is swept by the next start.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube.core.errors import ConfigError, DataError
from privcube.graphs.cluster import local as cluster_mod
from privcube.graphs.cluster.handle import resolve_cluster
from privcube.graphs.cluster.local import SCRATCH_PREFIX, private_scratch_dir, remove_scratch_dir

LOCAL = {"type": "local", "n_workers": 1, "threads_per_worker": 1, "memory_limit": "512MiB"}


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _scratch_folders(parent: Path) -> list[Path]:
    return sorted(parent.glob(f"{SCRATCH_PREFIX}*"))


def test_local_cluster_spills_into_a_private_folder_removed_on_close(tmp_path):
    parent = tmp_path / "spill"
    handle = resolve_cluster({**LOCAL, "local_directory": str(parent)})
    with handle as client:
        scratch = Path(handle.scratch_dir)
        assert scratch.parent == parent and scratch.name.startswith(f"{SCRATCH_PREFIX}{os.getpid()}-")
        assert _mode(scratch) == 0o700
        # every worker (spill buffer included) and the scheduler work inside the private folder
        dirs = client.run(lambda dask_worker: dask_worker.local_directory)
        (worker_dir,) = dirs.values()
        assert Path(worker_dir).is_relative_to(scratch) and Path(worker_dir).is_dir()
        assert Path(handle.cluster.scheduler.local_directory).is_relative_to(scratch)
        # the worker really writes there: spill a value to disk and find its file under the folder
        spilled = client.run(_spill_one)
        (spill_file,) = spilled.values()
        assert Path(spill_file).is_relative_to(scratch) and Path(spill_file).is_file()
    assert not scratch.exists()
    assert _scratch_folders(parent) == []
    assert parent.is_dir()  # the configured parent is the operator's: kept


def _spill_one(dask_worker) -> str:  # noqa: ANN001 - runs on the worker
    """Put an array in the worker's SpillBuffer, evict it to disk, return the file it was written to."""
    buf = dask_worker.data
    buf["privcube-spill-probe"] = np.arange(1000)
    while "privcube-spill-probe" in buf.fast:
        buf.evict()
    assert "privcube-spill-probe" in buf.slow
    root = Path(dask_worker.local_directory)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"nothing spilled under {root}"
    return str(files[0])


def test_private_folder_is_removed_when_the_job_fails(tmp_path):
    parent = tmp_path / "spill"
    handle = resolve_cluster({**LOCAL, "processes": False, "local_directory": str(parent)})
    with pytest.raises(RuntimeError, match="job failed"), handle as client:
        assert _mode(handle.scratch_dir) == 0o700
        assert client.scheduler.address.startswith("inproc://")  # processes: false works in-process
        assert client.submit(sum, [1, 2]).result() == 3
        raise RuntimeError("job failed")
    assert handle.cluster is None and handle.client is None and handle.scratch_dir is None
    assert _scratch_folders(parent) == []


def test_private_folder_is_removed_when_the_cluster_cannot_start(tmp_path, monkeypatch):
    import distributed

    parent = tmp_path / "spill"
    seen: list[tuple[str, int]] = []

    class Broken:
        def __init__(self, **kwargs) -> None:  # noqa: ANN003
            seen.append((kwargs["local_directory"], _mode(kwargs["local_directory"])))
            raise OSError("no more processes")

    monkeypatch.setattr(distributed, "LocalCluster", Broken)
    with pytest.raises(OSError, match="no more processes"), resolve_cluster({**LOCAL, "local_directory": str(parent)}):
        pass
    assert seen and seen[0][1] == 0o700 and Path(seen[0][0]).parent == parent
    assert _scratch_folders(parent) == []


def test_folder_of_a_killed_driver_is_swept_and_live_ones_kept(tmp_path):
    import fcntl

    parent = tmp_path / "spill"
    parent.mkdir()
    stale = parent / f"{SCRATCH_PREFIX}999999-dead"
    (stale / "dask-scratch-space" / "worker-x" / "storage").mkdir(parents=True)
    (stale / "dask-scratch-space" / "worker-x" / "storage" / "key").write_bytes(b"exact partial counts")
    (stale / ".privcube-scratch.lock").write_text("")
    live, live_lock = private_scratch_dir(parent)  # another cluster of this user, still running
    creating = parent / f"{SCRATCH_PREFIX}1-creating"  # no lock file yet: being created, left alone
    creating.mkdir()
    other = parent / "unrelated"
    other.mkdir()
    try:
        path, lock = private_scratch_dir(parent)
        try:
            assert not stale.exists()
            assert Path(live).is_dir() and creating.is_dir() and other.is_dir()
            with open(Path(path) / ".privcube-scratch.lock") as fh, pytest.raises(OSError):
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours is held while the cluster lives
        finally:
            remove_scratch_dir(path, lock)
        assert not Path(path).exists()
    finally:
        remove_scratch_dir(live, live_lock)


def test_unusable_local_directory_is_a_config_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"cluster\.local_directory"), \
            resolve_cluster({**LOCAL, "processes": False, "local_directory": str(blocker / "sub")}):
        pass


def test_local_defaults_follow_the_limits_of_this_process(monkeypatch):
    """Sized from dask's CPU_COUNT (affinity, cgroup quota) and distributed's MEMORY_LIMIT (cgroup, rlimit)."""
    import dask.system
    import distributed.system

    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)
    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", 6 * 2**30)
    assert cluster_mod.local_defaults() == {"n_workers": 3, "threads_per_worker": 1,
                                            "memory_limit": int(6 * 2**30 * 0.8 / 3)}
    assert cluster_mod.local_defaults(threads_per_worker=2)["n_workers"] == 1
    assert cluster_mod.local_defaults(n_workers=2)["memory_limit"] == int(6 * 2**30 * 0.8 / 2)


def test_flags_override_the_cluster_section():
    """--workers replaces n_workers; --scheduler-address / --scheduler-file replace the whole target."""
    spec = {**LOCAL, "n_workers": 64, "local_directory": "/somewhere"}
    h = resolve_cluster(spec, workers=2)
    assert h.type == "local" and h.options["n_workers"] == 2 and h.options["memory_limit"] == "512MiB"
    h = resolve_cluster(spec, scheduler_address="tcp://127.0.0.1:8786")
    assert (h.type, h.options) == ("address", {"address": "tcp://127.0.0.1:8786"})
    h = resolve_cluster({"type": "address", "address": "tcp://127.0.0.1:1"}, scheduler_file="/x/s.json")
    assert (h.type, h.options) == ("scheduler-file", {"scheduler_file": "/x/s.json"})
    h = resolve_cluster({"type": "threads", "num_workers": 8}, workers=1)
    assert (h.type, h.options) == ("threads", {"num_workers": 1})
    # the config's security settings survive the override
    h = resolve_cluster({"type": "local", "allow_insecure": True}, scheduler_address="tcp://10.0.0.5:8786")
    assert h.type == "address" and h.allow_insecure is True


# ----------------------------------------------------------------------------- through privcube.api
def _job(folder: Path, frame: pd.DataFrame, domain: dict[str, int], spill: Path) -> Path:
    (folder / "data").mkdir(parents=True)
    for i, idx in enumerate(np.array_split(np.arange(len(frame)), 3)):
        frame.iloc[idx].to_parquet(folder / "data" / f"p{i}.parquet", index=False)
    cfg = {"data": {"path": "data", "domain": domain}, "mechanism": {"name": "residual-planner"},
           "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6},
           "cluster": {**LOCAL, "local_directory": str(spill)}}
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "job.yaml"


def test_run_on_a_local_cluster_leaves_no_spill_folder(tmp_path, monkeypatch):
    from privcube import api

    made: list[str] = []
    real = cluster_mod.private_scratch_dir

    def recording(parent):  # noqa: ANN001, ANN202
        path, lock = real(parent)
        made.append(path)
        return path, lock

    monkeypatch.setattr(cluster_mod, "private_scratch_dir", recording)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 3000), "b": rng.integers(0, 4, 3000)})
    spill = tmp_path / "spill"
    cfg = _job(tmp_path / "ok", frame, {"a": 3, "b": 4}, spill)
    summary = api.run(cfg, tmp_path / "run", seed=1, quiet=True)
    assert (summary.out_dir / ".complete").exists()
    assert len(made) == 1 and Path(made[0]).parent == spill and not Path(made[0]).exists()
    assert _scratch_folders(spill) == []

    # a job that fails on the workers (out-of-domain value) removes it as well
    bad = frame.copy()
    bad.loc[5, "b"] = 9
    cfg = _job(tmp_path / "bad", bad, {"a": 3, "b": 4}, spill)
    with pytest.raises(DataError, match="'b'"):
        api.run(cfg, tmp_path / "run-bad", seed=1, quiet=True)
    assert len(made) == 2 and not Path(made[1]).exists()
    assert _scratch_folders(spill) == []
    assert json.loads((summary.out_dir / "ledger.json").read_text())["spent"]["rho"] > 0


def test_a_cli_run_leaves_nothing_in_the_temp_folder(tmp_path):
    """Everything a LocalCluster run writes outside --out goes through the private temp folder and is gone
    afterwards: with TMPDIR pointed at an empty folder, it is empty again once `privcube run` exits."""
    import subprocess
    import sys

    rng = np.random.default_rng(9)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 4000), "b": rng.integers(0, 4, 4000), "c": rng.integers(0, 2, 4000)})
    cfg = _job(tmp_path / "job", frame, {"a": 3, "b": 4, "c": 2}, tmp_path / "unused")
    raw = yaml.safe_load(cfg.read_text())
    raw["cluster"] = {"type": "local", "memory_limit": "512MiB"}  # default spill parent: the temp folder
    cfg.write_text(yaml.safe_dump(raw))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    r = subprocess.run([sys.executable, "-m", "privcube", "run", str(cfg), "--out", str(tmp_path / "run"),
                        "--workers", "1", "--seed", "4", "--quiet"], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "run" / ".complete").exists()
    assert list(tmp.rglob("*")) == []


@pytest.mark.slow  # about 35 s on 2 shared cores: two CLI runs on a LocalCluster
def test_sigterm_closes_the_cluster_and_removes_the_spill_folder(tmp_path):
    """A batch system cancels with SIGTERM: `privcube run` unwinds (exit 143), its LocalCluster's private
    folder is gone, and the run continues from its checkpoint with --resume."""
    import signal
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(10)
    frame = pd.DataFrame({k: rng.integers(0, s, 4000) for k, s in (("a", 3), ("b", 4), ("c", 2), ("d", 5))})
    cfg = _job(tmp_path / "job", frame, {"a": 3, "b": 4, "c": 2, "d": 5}, tmp_path / "unused")
    raw = yaml.safe_load(cfg.read_text())
    raw["cluster"] = {"type": "local", "memory_limit": "512MiB"}
    raw["mechanism"] = {"name": "aim-grem"}  # many rounds, one checkpoint each
    cfg.write_text(yaml.safe_dump(raw))
    tmp, out = tmp_path / "tmp", tmp_path / "run"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    args = [sys.executable, "-m", "privcube", "run", str(cfg), "--out", str(out), "--workers", "1", "--seed", "4",
            "--quiet"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not (out / "store.zarr" / "checkpoint" / "CURRENT").exists():  # the mechanism is under way
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.05)
        assert _scratch_folders(tmp)  # the cluster's private folder exists while it runs
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err[-3000:]
    assert "terminated" in err.strip().splitlines()[-1]
    assert list(tmp.rglob("*")) == []  # cluster closed, spill folder deleted
    assert not (out / ".complete").exists()
    r = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / ".complete").exists() and list(tmp.rglob("*")) == []
