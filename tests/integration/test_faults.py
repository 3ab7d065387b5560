"""Faults: a worker killed mid-pass, an unwritable output, a corrupt checkpoint, a full disk.

Each fault gives a clear one-line error (or, for a lost worker, the same seeded result as an
undisturbed run), and leaves what was already written intact so the run can be resumed.
A driver crash is simulated in-process by raising right after a checkpoint commit (tests/support/checkpoint_kill.py
patches the commit in the test only) (the subprocess SIGKILL version of the same is in test_resume.py).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from checkpoint_kill import after_commit

from privcube import api
from privcube.core.errors import CheckpointError, RunDirectoryError
from privcube.storage.zarr_store import TensorStore
from privcube.storage.checkpoint import RunCheckpoint

DOMAIN = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
SEED = 21


class Crash(BaseException):
    """Stands in for the driver dying (nothing in privcube catches it)."""


def make_job(folder: Path, n: int = 20000, parts: int = 6) -> Path:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = rng.integers(0, 2, n)
    d = (b + c + rng.integers(0, 3, n)) % 5
    e = rng.integers(0, 3, n)
    frame = pd.DataFrame(dict(a=a, b=b, c=c, d=d, e=e))
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for i, idx in enumerate(np.array_split(np.arange(n), parts)):
        frame.iloc[idx].to_parquet(folder / "data" / f"p{i}.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    cfg = {"mechanism": {"name": "aim-grem"}, "workload": [{"kway": 2}],
           "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": {"type": "threads"},
           "data": {"path": str(folder / "data"), "domain": str(folder / "domain.json")}}
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "job.yaml"


def tree_digest(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def assert_same_outputs(ref: Path, got: Path) -> None:
    """Answers, ledger, trace and stored tensors equal (bit for bit)."""
    assert (got / ".complete").exists()
    idx = json.loads((ref / "answers" / "index.json").read_text())
    assert json.loads((got / "answers" / "index.json").read_text()) == idx
    for g in idx["groups"]:
        pd.testing.assert_frame_equal(pd.read_parquet(ref / "answers" / g["file"]),
                                      pd.read_parquet(got / "answers" / g["file"]), check_exact=True)
    assert json.loads((got / "ledger.json").read_text()) == json.loads((ref / "ledger.json").read_text())
    rep = [json.loads((d / "report.json").read_text())["mechanism_report"] for d in (ref, got)]
    assert rep[0] == rep[1]
    s_ref, s_got = TensorStore(ref / "store.zarr", mode="r"), TensorStore(got / "store.zarr", mode="r")
    assert s_ref.names() == s_got.names()
    for name in s_ref.names():
        assert np.array_equal(s_ref.read(name), s_got.read(name)), name


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path]:
    """Config and an undisturbed reference run (threads, --seed 21)."""
    folder = tmp_path_factory.mktemp("faults")
    cfg = make_job(folder)
    ref = folder / "reference"
    api.run(cfg, ref, seed=SEED, quiet=True)
    return cfg, ref


def crash_after_round(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """Make the next run 'die' right after committing checkpoint round k."""
    def stop(round: int) -> None:
        if round == k:
            raise Crash(f"driver died after round {round}")

    after_commit(monkeypatch, stop)


# ---------------------------------------------------------------------------------------- worker loss
@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster with two worker processes (nannies restart a killed worker) and its client."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit="1GiB") as lc, Client(lc) as client:
        yield lc, client


def test_worker_killed_mid_pass_gives_the_same_seeded_result(tmp_path, job, cluster):
    from distributed.diagnostics.plugin import SchedulerPlugin

    cfg, ref = job
    lc, client = cluster
    client.wait_for_workers(2, timeout=60)

    class KillFirstBusyWorker(SchedulerPlugin):
        """SIGKILL the worker process that starts the first task of the run (the marginal pass)."""

        def __init__(self, scheduler) -> None:  # noqa: ANN001
            self.scheduler = scheduler
            self.killed: int | None = None
            self.removed: list[str] = []

        def transition(self, key, start, finish, *args, **kwargs) -> None:  # noqa: ANN001
            if finish != "processing" or self.killed is not None:
                return
            ws = self.scheduler.tasks[key].processing_on
            if ws is not None and ws.pid:
                self.killed = ws.pid
                os.kill(ws.pid, signal.SIGKILL)

        def remove_worker(self, scheduler, worker, **kwargs) -> None:  # noqa: ANN001
            self.removed.append(worker)

    plugin = KillFirstBusyWorker(lc.scheduler)
    lc.scheduler.add_plugin(plugin, name="kill-first-busy-worker")
    try:
        out = tmp_path / "run"
        api.run(cfg, out, seed=SEED, client=client, quiet=True)
    finally:
        lc.scheduler.remove_plugin(name="kill-first-busy-worker")
    assert plugin.killed is not None and plugin.removed, "no worker was killed"
    assert_same_outputs(ref, out)


def test_worker_killed_during_distributed_rounds_gives_the_same_seeded_result(tmp_path, job, cluster,
                                                                               monkeypatch, capfd):
    """Estimates held on workers (scattered shards) are lost with the worker: the run continues from its
    last checkpoint, charges nothing twice and ends with the undisturbed run's result."""
    cfg0, _ = job
    lc, client = cluster
    client.wait_for_workers(2, timeout=60)
    raw = yaml.safe_load(cfg0.read_text())
    raw["mechanism"]["distribute_min_cells"] = 1  # force the distributed marginal table
    cfg = tmp_path / "dist.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    ref = tmp_path / "ref"
    api.run(cfg, ref, seed=SEED, quiet=True)  # undisturbed, in memory
    pids = sorted(client.run(os.getpid).values())
    killed: list[int] = []

    def kill_a_worker(round: int) -> None:
        if round == 3 and not killed:
            killed.append(pids[0])
            os.kill(pids[0], signal.SIGKILL)

    after_commit(monkeypatch, kill_a_worker)
    out = tmp_path / "run"
    api.run(cfg, out, seed=SEED, client=client, quiet=True)
    assert killed
    assert "worker was lost" in capfd.readouterr().err
    assert_same_outputs(ref, out)
    led = json.loads((out / "ledger.json").read_text())
    labels = [c["label"] for c in led["charges"]]
    assert len(labels) == len(set(labels))
    assert led["spent"]["rho"] == pytest.approx(led["budget"]["rho"], rel=1e-9)


# ---------------------------------------------------------------------------------- unwritable output
def test_unwritable_output_is_a_clear_error_and_writes_nothing(tmp_path, job):
    cfg, _ = job
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    out = blocker / "run"
    with pytest.raises(RunDirectoryError) as info:
        api.run(cfg, out, seed=SEED, quiet=True)
    msg = str(info.value)
    assert str(out) in msg and "\n" not in msg
    assert blocker.read_text() == "x" and not out.exists()


# ---------------------------------------------------------------------------------- corrupt checkpoint
@pytest.mark.parametrize("damage", ["array", "manifest", "pointer"])
def test_corrupt_checkpoint_is_refused_and_outputs_kept(tmp_path, job, monkeypatch, damage):
    cfg, ref = job
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        crash_after_round(m, 3)
        with pytest.raises(Crash):
            api.run(cfg, out, seed=SEED, quiet=True)
    ck = out / "store.zarr" / "checkpoint"
    manifest = json.loads((ck / "manifest-3.json").read_text())
    if damage == "array":  # flip bytes in the stored chunk of the residual estimates (packed in the first base)
        version = manifest["arrays"]["zs"]["version"]
        chunk = next(p for p in (ck / version).rglob("*") if p.is_file() and p.name != "zarr.json")
        target, original = chunk, chunk.read_bytes()
        TensorStore(ck).write(version, TensorStore(ck).read(version) + 1.0)
    elif damage == "manifest":
        target = ck / "manifest-3.json"
        original = target.read_bytes()
        target.write_text('{"format": "privcube-checkpoint-v1", "round": ')
    else:
        target = ck / "CURRENT"
        original = target.read_bytes()
        target.write_text("../../etc/passwd")
    before = tree_digest(out)
    with pytest.raises(CheckpointError) as info:
        api.run(cfg, out, seed=SEED, resume=True, quiet=True)
    msg = str(info.value)
    assert "\n" not in msg and "checkpoint" in msg
    assert {"array": "checksum", "manifest": "corrupt", "pointer": "corrupt"}[damage] in msg
    assert tree_digest(out) == before  # nothing rewritten by the refused resume
    if damage == "array":
        TensorStore(ck).write(version, TensorStore(ck).read(version) - 1.0)
    else:
        target.write_bytes(original)
    api.run(cfg, out, seed=SEED, resume=True, quiet=True)  # repaired: resumes to the reference result
    assert_same_outputs(ref, out)


# ------------------------------------------------------------------------------------------ disk full
def _enospc_on(monkeypatch: pytest.MonkeyPatch, where) -> list[str]:  # noqa: ANN001
    """os.replace raises ENOSPC for destinations accepted by ``where`` (every atomic write renames)."""
    real = os.replace
    hits: list[str] = []

    def replace(src, dst, *args, **kwargs):  # noqa: ANN001, ANN202
        if where(Path(os.fsdecode(dst))):
            hits.append(os.fsdecode(dst))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return hits


def test_disk_full_while_writing_outputs(tmp_path, job, monkeypatch):
    cfg, ref = job
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        hits = _enospc_on(m, lambda p: p.parent.name == "answers")
        with pytest.raises(RunDirectoryError) as info:
            api.run(cfg, out, seed=SEED, quiet=True)
    assert hits
    msg = str(info.value)
    assert "\n" not in msg and str(out) in msg and "No space left on device" in msg and "--resume" in msg
    assert not (out / ".complete").exists()
    # the ledger is written first: the budget spent by the measurements is recorded even though the
    # answers could not be written
    spent = json.loads((out / "ledger.json").read_text())["spent"]
    assert spent["rho"] == pytest.approx(json.loads((out / "ledger.json").read_text())["budget"]["rho"])
    assert not [p for p in (out / "answers").iterdir()]  # no partial or temporary answer files
    before = tree_digest(out)
    assert before  # the checkpoint survived: resuming spends nothing new and gives the reference result
    api.run(cfg, out, seed=SEED, resume=True, quiet=True)
    assert_same_outputs(ref, out)
    after = tree_digest(out)
    ck = {k: v for k, v in before.items() if k.startswith("store.zarr/checkpoint/")}
    assert ck and {k: after.get(k) for k in ck} == ck  # the checkpoint was not rewritten


def test_disk_full_while_checkpointing_keeps_the_last_checkpoint(tmp_path, job, monkeypatch):
    cfg, ref = job
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        commits = iter(range(100))
        # the 2nd commit (rounds after the base) fails: the first, the base of round 0, is kept. (Commits are
        # written on the checkpoint's writer thread and rounds queued back to back are committed together,
        # so a commit is not one round: count commits, not rounds.)
        hits = _enospc_on(m, lambda p: p.name == "CURRENT" and next(commits) == 1)
        with pytest.raises(RunDirectoryError) as info:
            api.run(cfg, out, seed=SEED, quiet=True)
    assert hits and "\n" not in str(info.value) and "checkpoint" in str(info.value)
    assert (out / "store.zarr" / "checkpoint" / "CURRENT").read_text() == "manifest-0.json"
    assert RunCheckpoint(out / "store.zarr").load()[0] == 0
    assert not list((out / "store.zarr" / "checkpoint").glob(".CURRENT.*"))  # temp pointer cleaned up
    api.run(cfg, out, seed=SEED, resume=True, quiet=True)
    assert_same_outputs(ref, out)


# ---------------------------------------------------------------------------------- other failures
def test_failure_before_any_commit_leaves_no_folder_and_after_one_keeps_it(tmp_path, job, monkeypatch):
    """A mechanism failing with an ordinary error before anything was committed leaves no empty --out
    behind; failing after a committed checkpoint keeps the folder so --resume can continue."""
    from privcube.mechanisms.aim_grem.mechanism import AIMGReM

    cfg, ref = job
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(AIMGReM, "run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("solver exploded")))
        with pytest.raises(RuntimeError, match="solver exploded"):
            api.run(cfg, out, seed=SEED, quiet=True)
    assert not out.exists()
    # fails (ordinary error) right after committing round 2: the checkpoint is kept and resumes
    with monkeypatch.context() as m:
        def stop(round: int) -> None:
            if round == 2:
                raise RuntimeError("lost the network")
        after_commit(m, stop)
        with pytest.raises(RuntimeError, match="lost the network"):
            api.run(cfg, out, seed=SEED, quiet=True)
    assert out.exists() and any(p.is_file() for p in out.rglob("*"))
    api.run(cfg, out, seed=SEED, resume=True, quiet=True)
    assert_same_outputs(ref, out)
