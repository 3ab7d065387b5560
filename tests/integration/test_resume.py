"""A killed `privcube run` resumes to exactly the uninterrupted result, never re-spending budget.

The driver is killed with SIGKILL right after it commits checkpoint round k: ``tests/support/checkpoint_kill.py K``
runs the privcube command with the checkpoint's commit patched (in that process only) to kill itself at
that point, so the kill lands deterministically between two rounds. One test also
kills the process from outside at whatever moment the checkpoint first shows a round (slow-marked).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.core.errors import CheckpointError, RunDirectoryError
from privcube.storage.checkpoint import RunCheckpoint
from privcube.storage.zarr_store import TensorStore

DOMAIN = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
SEED = 3


KILL_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "checkpoint_kill.py"


def cli(*args: str, env: dict[str, str] | None = None, timeout: int = 300,
        stop_after: int | None = None) -> subprocess.CompletedProcess:
    """The privcube command; with ``stop_after=k`` SIGKILLed right after committing checkpoint round k."""
    e = dict(os.environ)
    e.update(env or {})
    head = [sys.executable, "-m", "privcube"] if stop_after is None else [sys.executable, str(KILL_SCRIPT),
                                                                           str(stop_after)]
    return subprocess.run([*head, *args], capture_output=True, text=True, timeout=timeout, env=e)


def make_job(folder: Path, n: int = 20000, seed: int = 3, kway: int = 2, **mech) -> Path:
    """A small correlated dataset (Parquet), its domain JSON and an aim-grem job config (eps=1, delta=1e-9)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = rng.integers(0, 2, n)
    d = (b + c + rng.integers(0, 3, n)) % 5
    e = rng.integers(0, 3, n)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(dict(a=a, b=b, c=c, d=d, e=e)).to_parquet(folder / "data" / "p.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    cfg = {"mechanism": {"name": "aim-grem", **mech}, "workload": [{"kway": kway}],
           "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": {"type": "threads"},
           "data": {"path": str(folder / "data"), "domain": str(folder / "domain.json")}}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def checkpoint_round(out: Path) -> int | None:
    cur = out / "store.zarr" / "checkpoint" / "CURRENT"
    if not cur.exists():
        return None
    name = cur.read_text().strip()
    return int(name[len("manifest-"):-len(".json")])


def tree_digest(out: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``out``."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def assert_same_run(ref: Path, got: Path) -> None:
    """Answers, ledger, trace and stored tensors of two finished runs are identical."""
    assert (got / ".complete").exists()
    idx_ref = json.loads((ref / "answers" / "index.json").read_text())
    idx_got = json.loads((got / "answers" / "index.json").read_text())
    assert idx_ref == idx_got
    for g in idx_ref["groups"]:
        pd.testing.assert_frame_equal(pd.read_parquet(ref / "answers" / g["file"]),
                                      pd.read_parquet(got / "answers" / g["file"]), check_exact=True)
    led_ref = json.loads((ref / "ledger.json").read_text())
    led_got = json.loads((got / "ledger.json").read_text())
    assert led_got["charges"] == led_ref["charges"]
    assert led_got == led_ref
    rep_ref = json.loads((ref / "report.json").read_text())["mechanism_report"]
    rep_got = json.loads((got / "report.json").read_text())["mechanism_report"]
    assert rep_got["trace"] == rep_ref["trace"]
    assert rep_got == rep_ref
    s_ref, s_got = TensorStore(ref / "store.zarr", mode="r"), TensorStore(got / "store.zarr", mode="r")
    assert s_ref.names() == s_got.names() and s_ref.names()
    for name in s_ref.names():
        assert np.array_equal(s_ref.read(name), s_got.read(name)), name


def assert_budget_spent_once(out: Path) -> dict:
    led = json.loads((out / "ledger.json").read_text())
    labels = [c["label"] for c in led["charges"]]
    assert len(labels) == len(set(labels)), "a charge was recorded twice"
    total = sum(c["rho"] for c in led["charges"])
    assert total == pytest.approx(led["budget"]["rho"], rel=1e-9)
    assert led["spent"]["rho"] == pytest.approx(led["budget"]["rho"], rel=1e-9)
    return led


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path, int]:
    """The job config, an uninterrupted reference run with --seed 3, and its number of rounds."""
    folder = tmp_path_factory.mktemp("resume")
    cfg = make_job(folder)
    ref = folder / "reference"
    r = cli("run", str(cfg), "--out", str(ref), "--seed", str(SEED), "--quiet")
    assert r.returncode == 0, r.stderr
    rounds = json.loads((ref / "report.json").read_text())["mechanism_report"]["rounds"]
    assert rounds >= 6
    return cfg, ref, rounds


def kill_after(cfg: Path, out: Path, k: int, *seed_args: str) -> None:
    """Run until checkpoint round ``k`` is committed, then SIGKILL (checkpoint_kill.py); check what is left."""
    r = cli("run", str(cfg), "--out", str(out), *seed_args, "--quiet", stop_after=k)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert checkpoint_round(out) == k
    assert not (out / ".complete").exists() and not (out / "ledger.json").exists()


@pytest.mark.parametrize("which", ["middle", "last"])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, job, which):
    """Killed after round k (mid-run, or after the last round before any output): resume == reference."""
    cfg, ref, rounds = job
    k = {"middle": rounds // 2, "last": rounds}[which]
    out = tmp_path / "run"
    kill_after(cfg, out, k, "--seed", str(SEED))
    if which == "middle":  # without --resume the interrupted directory is refused and left alone
        before = tree_digest(out)
        with pytest.raises(RunDirectoryError, match="--resume"):
            api.run(cfg, out, seed=SEED, quiet=True)
        assert tree_digest(out) == before
    r = cli("run", str(cfg), "--out", str(out), "--seed", str(SEED), "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert_same_run(ref, out)
    assert_budget_spent_once(out)


def test_resume_with_other_seed_or_config_is_refused(tmp_path, job):
    cfg, _, rounds = job
    out = tmp_path / "run"
    kill_after(cfg, out, 2, "--seed", str(SEED))
    before = tree_digest(out)
    other = yaml.safe_load(cfg.read_text())
    other["privacy"]["epsilon"] = 2.0
    other_cfg = tmp_path / "other.yaml"
    other_cfg.write_text(yaml.safe_dump(other))
    r = cli("run", str(cfg), "--out", str(out), "--seed", "4", "--resume", "--quiet")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "different run" in r.stderr and "--seed 4" in r.stderr
    assert tree_digest(out) == before
    for seed, c, needle in [(None, cfg, "no seed"), (SEED, other_cfg, "config"), (5, other_cfg, "seed")]:
        with pytest.raises(CheckpointError, match="different run") as info:
            api.run(c, out, seed=seed, resume=True, quiet=True)
        assert needle in str(info.value) and "\n" not in str(info.value)
        assert tree_digest(out) == before  # nothing rewritten, the checkpoint is still usable
    assert checkpoint_round(out) == 2


def test_finished_run_is_never_rewritten(tmp_path, job):
    _, ref, _ = job
    cfg = job[0]
    before = tree_digest(ref)
    stat = {p: os.stat(p).st_mtime_ns for p in ref.rglob("*")}
    r = cli("run", str(cfg), "--out", str(ref), "--seed", str(SEED), "--resume", "--quiet")
    assert r.returncode == 2 and "finished run" in r.stderr
    for resume in (False, True):
        with pytest.raises(RunDirectoryError, match="finished run"):
            api.run(cfg, ref, seed=SEED, resume=resume, quiet=True)
    assert tree_digest(ref) == before
    assert {p: os.stat(p).st_mtime_ns for p in ref.rglob("*")} == stat


def test_resume_without_a_run_is_refused(tmp_path, job):
    with pytest.raises(RunDirectoryError, match="no run to resume"):
        api.run(job[0], tmp_path / "nothing", resume=True, quiet=True)
    assert not (tmp_path / "nothing").exists()


def checkpoint_charges(out: Path) -> list[dict]:
    """Ledger charges recorded by the committed checkpoint: the base's, then each log record's."""
    rnd, state = RunCheckpoint(out / "store.zarr").load()
    return state["meta"]["ledger"]["charges"] + [c for rec in state["log"] for c in rec["meta"]["charges"]]


@pytest.mark.parametrize("k", [0, 2])
def test_unseeded_run_resumes_without_respending(tmp_path, job, k):
    """Killed right after initialisation (round 0) or round 2 without a seed: resumes with fresh noise for
    the rounds not yet checkpointed, keeps the charges that were, and spends the budget once."""
    cfg, _, rounds = job
    out = tmp_path / "run"
    kill_after(cfg, out, k)
    manifest = json.loads((out / "store.zarr" / "checkpoint" / f"manifest-{k}.json").read_text())
    charged = checkpoint_charges(out)
    assert manifest["identity"]["seed"] is None
    assert len(charged) == len(DOMAIN) + 2 * k  # init: one per attribute; then select + measure per round
    r = cli("run", str(cfg), "--out", str(out), "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    led = assert_budget_spent_once(out)
    assert led["charges"][:len(charged)] == charged  # the charges before the kill, kept once
    assert led["noise"] == {"seeded": False, "seed": None}
    trace = json.loads((out / "report.json").read_text())["mechanism_report"]["trace"]
    assert [t["round"] for t in trace] == list(range(1, len(trace) + 1))


@pytest.mark.slow
def test_external_sigkill_at_any_moment(tmp_path):
    """Kill from outside as soon as the checkpoint shows a round (wherever the driver is), then resume."""
    cfg = make_job(tmp_path, n=20000, kway=3)
    ref = tmp_path / "ref"
    r = cli("run", str(cfg), "--out", str(ref), "--seed", "9", "--quiet")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run"
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-m", "privcube", "run", str(cfg), "--out", str(out), "--seed", "9",
                          "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if (checkpoint_round(out) or 0) >= 2:
                p.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != -signal.SIGKILL:
        pytest.skip("the run finished before the kill landed")
    assert not (out / ".complete").exists()
    r = cli("run", str(cfg), "--out", str(out), "--seed", "9", "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    assert_same_run(ref, out)
    assert_budget_spent_once(out)


@pytest.mark.parametrize("seeded", [True, False])
def test_resume_of_a_mechanism_without_checkpoints(tmp_path, job, seeded):
    """ResidualPlanner keeps no checkpoint: a run killed while writing outputs resumes only when seeded
    (identical noise: the missing files are written, the completed ones kept untouched); unseeded, fresh
    noise would release a second measurement."""
    raw = yaml.safe_load(job[0].read_text())
    raw["mechanism"] = {"name": "residual-planner"}
    cfg = tmp_path / "rp.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    seed = SEED if seeded else None
    out = tmp_path / "run"
    api.run(cfg, out, seed=seed, quiet=True)
    answers = {p.name: p.read_bytes() for p in (out / "answers").glob("*.parquet")}
    ledger = json.loads((out / "ledger.json").read_text())
    for name in (".complete", "report.json"):  # as if killed before the last two writes
        (out / name).unlink()
    lost = sorted((out / "answers").glob("*.parquet"))[-1]  # ... and before the last answer file
    lost.unlink()
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "answers").glob("*.parquet")}
    if not seeded:
        with pytest.raises(RunDirectoryError, match="unseeded"):
            api.run(cfg, out, resume=True, quiet=True)
        assert {p.name: p.read_bytes() for p in (out / "answers").glob("*.parquet")} == \
            {n: d for n, d in answers.items() if n != lost.name}
        return
    api.run(cfg, out, seed=seed, resume=True, quiet=True)
    assert (out / ".complete").exists()
    got = {p.name: p.read_bytes() for p in (out / "answers").glob("*.parquet")}
    assert got.keys() == answers.keys()
    for name, data in answers.items():  # identical content; the missing file written again
        pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(got[name])), pd.read_parquet(io.BytesIO(data)),
                                      check_exact=True)
    # completed outputs are not rewritten: same inode, same modification time
    assert {n: (p.stat().st_ino, p.stat().st_mtime_ns) for n, p in
            ((n, out / "answers" / n) for n in kept)} == kept
    index = json.loads((out / "answers" / "index.json").read_text())["groups"]
    assert sum(g["rows"] for g in index) == sum(len(pd.read_parquet(io.BytesIO(d))) for d in answers.values())
    assert json.loads((out / "ledger.json").read_text())["charges"] == ledger["charges"]
