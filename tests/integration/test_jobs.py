"""The one driver: every job kind (single-table, relational) runs through ``api.run_job`` and checkpoints
through ``storage.checkpoint``; production code carries no test hook."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from checkpoint_kill import after_commit
from relational_files import _o2m_files

from privcube import api
from privcube.jobs import JobKind, load_job
from privcube.relational.job import RelationalJobKind
from privcube.jobs.single_table import SingleTableJob

ROOT = Path(__file__).resolve().parents[2]


def _single(folder: Path) -> dict:
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.integers(0, 3, 300), "b": rng.integers(0, 2, 300)}).to_parquet(folder / "t.parquet")
    return {"data": {"path": str(folder / "t.parquet"), "domain": {"a": 3, "b": 2}},
            "mechanism": {"name": "aim-grem", "max_rounds": 2}, "workload": [{"kway": 2}],
            "privacy": {"epsilon": 1.0, "delta": 1e-9}}


def _protocol_members() -> list[str]:
    return [n for n, v in vars(JobKind).items() if callable(v) and not n.startswith("_")]


def test_both_kinds_provide_every_member_of_the_protocol() -> None:
    members = _protocol_members()
    assert {"fingerprint", "read_inputs", "measure", "write", "open_checkpoint"} <= set(members)
    for kind in (SingleTableJob, RelationalJobKind):
        for name in members:
            ours, declared = getattr(kind, name), getattr(JobKind, name)
            assert callable(ours), (kind.__name__, name)
            assert list(inspect.signature(ours).parameters) == list(inspect.signature(declared).parameters), name


def test_load_job_picks_the_kind_by_mechanism(tmp_path: Path) -> None:
    rel = load_job(_o2m_files(tmp_path), base=tmp_path)
    single = load_job(_single(tmp_path))
    assert isinstance(rel, RelationalJobKind) and rel.mechanism == "relational"
    assert isinstance(single, SingleTableJob) and single.mechanism == "aim-grem"
    assert rel.fingerprint() == load_job(_o2m_files(tmp_path), base=tmp_path).fingerprint()  # reads no data


@pytest.mark.parametrize("which", ["single", "relational"])
def test_every_kind_runs_through_the_driver_and_storage_checkpoint(tmp_path: Path, which: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    driven: list[str] = []
    real = api.run_job

    def run_job(job, out, **kwargs):  # noqa: ANN001, ANN003, ANN202
        driven.append(type(job).__name__)
        return real(job, out, **kwargs)

    monkeypatch.setattr(api, "run_job", run_job)
    rounds: list[int] = []
    after_commit(monkeypatch, rounds.append)  # storage.checkpoint.RunCheckpoint commits, counted
    raw = _o2m_files(tmp_path) if which == "relational" else _single(tmp_path)
    cfg = tmp_path / "job.json"
    cfg.write_text(json.dumps(raw))
    res = api.run(cfg, tmp_path / "run", seed=1, quiet=True)
    assert driven == ["RelationalJobKind" if which == "relational" else "SingleTableJob"]
    assert rounds and rounds == sorted(rounds), rounds  # checkpoints committed round by round
    assert (res.out_dir / ".complete").exists()
    assert res.ledger["spent"]["rho"] <= res.ledger["budget"]["rho"] * (1 + 1e-12)


def test_no_test_hook_in_production_code() -> None:
    hits = [str(p.relative_to(ROOT)) for layer in ("engine", "graphs", "storage") for p in (ROOT / layer).rglob("*.py")
            if "PRIVCUBE_TEST" in p.read_text() or "_test_stop_after" in p.read_text()]
    assert hits == []
