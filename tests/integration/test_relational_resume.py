"""A relational `privcube run` killed after a stage resumes without re-spending budget or rewriting outputs.

``tests/support/checkpoint_kill.py k`` runs the privcube command SIGKILLed right after checkpoint round k is
committed (the checkpoint's commit patched in that process only). Relational rounds: 0, 1 = the two synthetic tables (stage 1), then
2 + t = link iteration t (stage 2).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from checkpoint_kill import Crash, after_commit
from checkpoint_kill import crash_after as crash_after_round
from privcube.core.errors import CheckpointError, RunDirectoryError
from privcube.relational.stages.checkpoint import RelationalCheckpoint

ITER = 3
MECH = {"name": "relational", "d_max": 10, "iterations": ITER, "pgd_iters": 20, "candidates": 40,
        "slice_fraction": 0.6, "slices_per_iteration": 1, "max_noise": None, "workloads_per_iteration": 1}


def _files(folder: Path) -> Path:
    rng = np.random.default_rng(7)
    n_p, n_c = 30, 120
    parents = pd.DataFrame({"id": np.arange(n_p) + 1, "region": rng.integers(0, 3, n_p), "size": rng.integers(0, 2, n_p)})
    par = np.concatenate([np.repeat(np.arange(n_p), 2), rng.integers(0, n_p, n_c - 2 * n_p)])
    rng.shuffle(par)
    children = pd.DataFrame({"sid": np.arange(n_c), "pid": par + 1, "device": (parents["region"].to_numpy()[par]
                             + (rng.random(n_c) < 0.2)) % 3, "kind": rng.integers(0, 2, n_c)})
    parents.to_parquet(folder / "parents.parquet")
    children.to_parquet(folder / "children.parquet")
    cfg = {"data": {"tables": {"parents": {"path": "parents.parquet", "domain": {"region": 3, "size": 2}, "key": "id"},
                               "children": {"path": "children.parquet", "domain": {"device": 3, "kind": 2},
                                            "key": "sid"}},
                    "links": {"from": "children.pid", "to": "parents.id"}},
           "mechanism": MECH,
           "privacy": {"tables": {"parents": {"epsilon": 1.0, "delta": 1e-6}, "children": {"epsilon": 1.0, "delta": 1e-6}},
                       "links": {"epsilon": 4.0, "delta": 1e-6}}}
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cli(cfg: Path, out: Path, *extra: str, stop: int | None = None, seed: str = "5") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    head = [sys.executable, "-m", "privcube"] if stop is None else [
        sys.executable, str(Path(__file__).resolve().parents[1] / "support" / "checkpoint_kill.py"), str(stop)]
    return subprocess.run([*head, "run", str(cfg), "--out", str(out), "--seed", seed,
                           "--quiet", *extra], capture_output=True, text=True, timeout=180, env=env)


def _round(out: Path) -> int | None:
    cur = out / "checkpoint" / "CURRENT"
    return int(cur.read_text().strip()[len("manifest-"):-len(".json")]) if cur.exists() else None


def _run(cfg: Path, out: Path, *, resume: bool = False, seed: int | None = 5, crash_after: int | None = None,
         monkeypatch: pytest.MonkeyPatch | None = None) -> object:
    from privcube.api import run_job
    from privcube.jobs import load_job

    if crash_after is not None:
        assert monkeypatch is not None
        after_commit(monkeypatch, crash_after_round(crash_after))
        with pytest.raises(Crash):
            run_job(load_job(yaml.safe_load(cfg.read_text()), base=cfg.parent), out, seed=seed, quiet=True)
        monkeypatch.undo()
        return None
    return run_job(load_job(yaml.safe_load(cfg.read_text()), base=cfg.parent), out, seed=seed, resume=resume, quiet=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("rel-resume")
    cfg = _files(folder)
    ref = folder / "ref"
    _run(cfg, ref)
    return cfg, ref


def _assert_same(ref: Path, got: Path) -> None:
    assert (got / ".complete").exists() and not (got / "checkpoint").exists()
    for name in ("children", "parents"):
        pd.testing.assert_frame_equal(pd.read_parquet(ref / f"synthetic/{name}.parquet"),
                                      pd.read_parquet(got / f"synthetic/{name}.parquet"))
    a, b = json.loads((ref / "ledger.json").read_text()), json.loads((got / "ledger.json").read_text())
    assert a["charges"] == b["charges"] and a["spent"] == b["spent"]  # replayed, never charged twice
    assert len([c for c in b["charges"] if c["label"] == "links:measure"]) == ITER
    assert b["spent"]["rho"] <= b["budget"]["rho"] * (1 + 1e-12)
    assert abs(b["spent"]["epsilon"] - 6.0) < 1e-9  # ε_parents + ε_children + ε_rel, once


def test_sigkilled_run_resumes_to_the_uninterrupted_result(reference: tuple[Path, Path], tmp_path: Path) -> None:
    """A real SIGKILL after stage 1 (round 1: both tables committed), then `privcube run --resume`."""
    cfg, ref = reference
    out = tmp_path / "run"
    killed = _cli(cfg, out, stop=1)
    assert killed.returncode == -9, killed.stderr
    assert _round(out) == 1 and not (out / ".complete").exists() and not (out / "synthetic").exists()
    ident = json.loads((out / "checkpoint" / "manifest-1.json").read_text())["identity"]
    rnd, state = RelationalCheckpoint(out / "checkpoint", ident).load()
    labels = [c["label"] for c in state["meta"]["ledger"]["charges"]]
    assert rnd == 1 and "links:measure" not in labels and labels  # both tables spent, nothing of the links yet
    assert "syn.parents" in state["arrays"] and "syn.children" in state["arrays"]
    # another seed or another config is refused before any data is read; the checkpoint is untouched
    with pytest.raises(CheckpointError, match="seed"):
        _run(cfg, out, resume=True, seed=6)
    raw = yaml.safe_load(cfg.read_text())
    raw["privacy"]["links"]["epsilon"] = 5.0
    from privcube.api import run_job
    from privcube.jobs import load_job

    with pytest.raises(CheckpointError, match="config differs"):
        run_job(load_job(raw, base=cfg.parent), out, seed=5, resume=True, quiet=True)
    with pytest.raises(RunDirectoryError, match="--resume"):  # a started folder needs --resume
        _run(cfg, out)
    assert _round(out) == 1
    resumed = _cli(cfg, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    _assert_same(ref, out)
    assert json.loads((out / "report.json").read_text())["resumed"] is True


@pytest.mark.parametrize("stop", [0, 3])  # after the first table; after link iteration 1
def test_crashed_run_resumes_per_stage(reference: tuple[Path, Path], tmp_path: Path, stop: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, ref = reference
    out = tmp_path / "run"
    _run(cfg, out, crash_after=stop, monkeypatch=monkeypatch)
    assert _round(out) == stop
    _run(cfg, out, resume=True)
    _assert_same(ref, out)


def test_resume_keeps_outputs_already_written(reference: tuple[Path, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Crashed after the last iteration: an output file written before the crash is not rewritten."""
    cfg, ref = reference
    out = tmp_path / "run"
    _run(cfg, out, crash_after=2 + ITER - 1, monkeypatch=monkeypatch)
    (out / "synthetic").mkdir(mode=0o700)
    kept = out / "synthetic" / "parents.parquet"
    kept.write_bytes((ref / "synthetic" / "parents.parquet").read_bytes())
    os.utime(kept, ns=(1_000_000_000, 1_000_000_000))
    res = _run(cfg, out, resume=True)
    assert kept.stat().st_mtime_ns == 1_000_000_000  # not rewritten
    _assert_same(ref, out)
    assert res.ledger["charges"] == json.loads((ref / "ledger.json").read_text())["charges"]
    with pytest.raises(RunDirectoryError, match="finished run"):  # a finished run is never resumed again
        _run(cfg, out, resume=True)


def test_unseeded_crash_resumes_without_respending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _files(tmp_path)
    out = tmp_path / "run"
    _run(cfg, out, seed=None, crash_after=2, monkeypatch=monkeypatch)
    res = _run(cfg, out, resume=True, seed=None)
    labels = [c["label"] for c in res.ledger["charges"]]
    assert labels.count("links:measure") == ITER and labels.count("links:select") == ITER
    assert abs(res.ledger["spent"]["epsilon"] - 6.0) < 1e-9
    assert res.ledger["spent"]["rho"] <= res.ledger["budget"]["rho"] * (1 + 1e-12)
