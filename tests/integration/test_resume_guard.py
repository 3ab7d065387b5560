"""``--resume`` refuses what is not this run (issue 33, item 6): a changed config or seed even before the
first checkpoint (the run folder records them in ``.started`` when it is made), and a folder that is not a
privcube run. Runs are killed (SIGKILL) as a user's would be; every refusal is one line, exit 2, with the
folder byte for byte as it was."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from run_checks import one_line_error
from run_checks import snapshot as full_snapshot

from privcube import api
from privcube.core.errors import CheckpointError, RunDirectoryError

#: ``python -c KILLER WHERE N privcube-args...``: the privcube command, SIGKILLed at the N-th call of WHERE
#: (test-only patch, as tests/support/checkpoint_kill.py; production code has no hook)
KILLER = textwrap.dedent("""
    import os, signal, sys
    where, n = sys.argv[1], int(sys.argv[2])
    calls = [0]
    if where == "checkpoint":  # before the first checkpoint is committed
        from privcube.storage.checkpoint import RunCheckpoint as target
        names = ("save", "append")
    else:  # while the answer files are written
        import privcube.storage.outputs as target
        names = ("atomic_write_parquet",)
    for name in names:
        real = getattr(target, name)
        def killing(*a, _real=real, **k):
            calls[0] += 1
            if calls[0] >= n:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*a, **k)
        setattr(target, name, killing)
    from privcube.cli import main
    sys.exit(main(sys.argv[3:]))
""")


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file and folder under ``root`` but lock files: a SIGKILLed run leaves its ``.DIR.lock`` (the
    kernel drops the lock itself), which the next run on DIR takes and removes."""
    return {k: v for k, v in full_snapshot(root).items() if not k.endswith(".lock")}


def privcube(*args: str, kill: tuple[str, int] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    head = [sys.executable, "-m", "privcube"] if kill is None else [sys.executable, "-c", KILLER, kill[0], str(kill[1])]
    return subprocess.run([*head, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    n = 3000
    pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 4, n), "c": rng.integers(0, 2, n)}).to_parquet(
        tmp_path / "data.parquet", index=False)
    (tmp_path / "dom.json").write_text(json.dumps({"a": 3, "b": 4, "c": 2}))
    return tmp_path


def job(ws: Path, name: str, mechanism: str, epsilon: float = 1.0) -> str:
    cfg = {"data": {"path": "data.parquet", "domain": "dom.json"}, "mechanism": {"name": mechanism},
           "workload": [{"kway": 2}], "privacy": {"epsilon": epsilon, "delta": 1e-6}, "cluster": {"type": "threads"}}
    (ws / name).write_text(yaml.safe_dump(cfg))
    return str(ws / name)


def answers(out: Path) -> dict[str, pd.DataFrame]:
    return {p.name: pd.read_parquet(p) for p in sorted((out / "answers").glob("*.parquet"))}


@pytest.mark.parametrize(("mechanism", "kill_at"), [
    ("aim-grem", ("checkpoint", 1)),          # killed before its first checkpoint is committed
    ("residual-planner", ("answers", 2)),     # no checkpoint at all: killed while writing its answers
])
def test_resume_refuses_a_changed_config_or_seed_before_any_checkpoint(ws, mechanism, kill_at):
    """Issue 33 case 6: with no checkpoint to compare, --resume accepted epsilon 1 -> 5 (and another seed),
    mixing two runs' releases in one folder."""
    cfg, eps5 = job(ws, "job.yaml", mechanism), job(ws, "eps5.yaml", mechanism, epsilon=5.0)
    out = ws / "run"
    r = privcube("run", cfg, "--out", str(out), "--seed", "3", "--quiet", kill=kill_at)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    assert (out / ".started").exists() and not (out / ".complete").exists()
    assert not (out / "store.zarr" / "checkpoint" / "CURRENT").exists()  # nothing checkpointed
    before = snapshot(ws)
    for args, needle in [((eps5, "--seed", "3"), "config"), ((cfg, "--seed", "4"), "--seed 4"),
                         ((cfg,), "no seed")]:
        line = one_line_error(privcube("run", *args, "--out", str(out), "--resume", "--quiet"))
        assert "different run" in line and needle in line, line
        assert snapshot(ws) == before
    with pytest.raises(CheckpointError, match="different run"):  # the Python API the same
        api.run(eps5, out, seed=3, resume=True, quiet=True)
    assert snapshot(ws) == before
    # without --resume the folder is an interrupted run: the hint is --resume, nothing changes
    assert "--resume" in one_line_error(privcube("run", cfg, "--out", str(out), "--seed", "3", "--quiet"))
    assert snapshot(ws) == before
    # the same config and seed resume, to the uninterrupted run's answers
    r = privcube("run", cfg, "--out", str(out), "--seed", "3", "--resume", "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    ref = ws / "ref"
    assert privcube("run", cfg, "--out", str(ref), "--seed", "3", "--quiet", "--no-report").returncode == 0
    got, want = answers(out), answers(ref)
    assert got and list(got) == list(want)
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name])
    assert not (out / ".started").exists() and (out / ".complete").exists()


def test_resume_refuses_a_folder_that_is_not_a_privcube_run(ws):
    """Issue 33 case 6: following the "use --resume" hint on a folder of unrelated files wrote the run among
    them; now neither the hint nor --resume leads there."""
    cfg = job(ws, "job.yaml", "residual-planner")
    folder = ws / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8 not a run")
    before = snapshot(ws)
    line = one_line_error(privcube("run", cfg, "--out", str(folder), "--quiet"))
    assert "did not write" in line and "--resume" not in line
    line = one_line_error(privcube("run", cfg, "--out", str(folder), "--resume", "--quiet"))
    assert "not a privcube run folder" in line and "'cat.jpg'" in line
    with pytest.raises(RunDirectoryError, match="not a privcube run folder"):
        api.run(cfg, folder, resume=True, quiet=True)
    assert snapshot(ws) == before


def test_resume_of_a_relational_run_killed_at_its_first_checkpoint_compares_the_config(ws):
    """The relational run folder appears with its first checkpoint; killed while committing it, the folder
    holds the run's record (and no checkpoint): a changed budget is refused, the same config resumes."""
    from relational_files import _o2m_files

    raw = _o2m_files(ws)
    (ws / "rel.yaml").write_text(yaml.safe_dump(raw))
    raw["privacy"]["links"]["epsilon"] = 5.0
    (ws / "rel5.yaml").write_text(yaml.safe_dump(raw))
    out = ws / "relrun"
    r = privcube("run", str(ws / "rel.yaml"), "--out", str(out), "--seed", "1", "--quiet", kill=("checkpoint", 1),
                 cwd=ws)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    assert (out / ".started").exists() and not (out / "checkpoint" / "CURRENT").exists()
    before = snapshot(ws)
    line = one_line_error(privcube("run", str(ws / "rel5.yaml"), "--out", str(out), "--seed", "1", "--resume",
                                   "--quiet", cwd=ws))
    assert "different run" in line and "config" in line
    assert snapshot(ws) == before
    r = privcube("run", str(ws / "rel.yaml"), "--out", str(out), "--seed", "1", "--resume", "--quiet", "--no-report",
                 cwd=ws)
    assert r.returncode == 0, r.stderr
    assert (out / ".complete").exists() and (out / "synthetic" / "links.parquet").exists()


def test_interrupted_hint_points_to_resume_only_for_a_run(ws, capsys, monkeypatch):
    """The Ctrl-C / SIGTERM hint names --resume only when a privcube run was left in --out."""
    from privcube.cli import _interrupted_run_hint

    (ws / "mine").mkdir()
    (ws / "mine" / "notes.txt").write_text("x")
    assert "--resume" not in _interrupted_run_hint(ws / "mine")
    assert "without --resume" in _interrupted_run_hint(ws / "absent")
    (ws / "run").mkdir()
    (ws / "run" / ".started").write_text(json.dumps({"privcube_run": "started", "identity": None}))
    assert "--resume" in _interrupted_run_hint(ws / "run")
