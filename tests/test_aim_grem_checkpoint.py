"""AIM+GReM checkpoints: resume after round k equals the uninterrupted run; corruption is detected."""
from __future__ import annotations

import json

import numpy as np
import pytest

from privcube.domain import Domain
from privcube.errors import CheckpointError
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.mechanisms.base import RunContext
from privcube.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.storage.checkpoint import RunCheckpoint
from privcube.workload import Workload

DOM = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
W = Workload.kway(DOM, 2)
BUDGET = PrivacyBudget.from_rho(0.4)


def _oracle():
    rng = np.random.default_rng(11)
    base = rng.integers(0, 3, 2000)
    cols = [base] + [(base + rng.integers(0, 2, 2000)) % s for s in DOM.shape[1:]]
    return ArrayOracle(DOM, np.stack(cols, 1))


def _run(params, ctx=None, ledger=None):
    ledger = ledger or PrivacyLedger(BUDGET)
    return AIMGReM(params).run(_oracle(), W, BUDGET, ledger, NoiseSource(5), ctx), ledger


@pytest.mark.parametrize("measure", ["crp", "iid"])
def test_resume_after_round_k_equals_uninterrupted(tmp_path, measure):
    full, full_ledger = _run({"measure": measure})
    rounds = full.report["rounds"]
    assert rounds >= 3
    k = rounds // 2
    ck = RunCheckpoint(tmp_path / "store.zarr", identity={"mechanism": "aim-grem", "seed": 5})
    part, part_ledger = _run({"measure": measure, "max_rounds": k}, RunContext(checkpoint=ck))
    assert part.report["rounds"] == k and not part.report["done"]
    assert part_ledger.spent_rho < BUDGET.rho
    # a fresh process: new checkpoint object and a fresh ledger
    ck2 = RunCheckpoint(tmp_path / "store.zarr", identity={"mechanism": "aim-grem", "seed": 5})
    assert ck2.load()[0] == k
    res, ledger = _run({"measure": measure}, RunContext(checkpoint=ck2, resume=True))
    assert res.report["trace"] == full.report["trace"]
    for a, b in zip(res.answers, full.answers):
        assert np.array_equal(a.estimate, b.estimate)
        assert np.array_equal(a.variance, b.variance)
    assert ledger.charges == full_ledger.charges  # nothing re-spent, nothing missing
    assert ledger.spent_rho == pytest.approx(BUDGET.rho, rel=1e-12)


def test_resume_of_finished_run_spends_nothing(tmp_path):
    ck = RunCheckpoint(tmp_path / "s.zarr")
    done, led = _run({}, RunContext(checkpoint=ck))
    again, led2 = _run({}, RunContext(checkpoint=RunCheckpoint(tmp_path / "s.zarr"), resume=True))
    assert led2.charges == led.charges
    assert all(np.array_equal(a.estimate, b.estimate) for a, b in zip(done.answers, again.answers))


def test_checkpoint_roundtrip_incremental_and_atomic(tmp_path):
    ck = RunCheckpoint(tmp_path / "s.zarr", identity={"x": 1})
    assert ck.load() is None
    a, b = np.arange(6.0).reshape(2, 3), np.array(2.5)
    ck.save(0, {"meta": {"k": [1, 2]}, "arrays": {"a": a, "b": b}})
    ck.save(1, {"meta": {"k": [3]}, "arrays": {"a": a, "b": b + 1}})
    rnd, state = RunCheckpoint(tmp_path / "s.zarr", identity={"x": 1}).load()
    assert rnd == 1 and state["meta"] == {"k": [3]}
    assert np.array_equal(state["arrays"]["a"], a) and state["arrays"]["b"] == 3.5
    versions = sorted(p.name for p in (tmp_path / "s.zarr" / "checkpoint").iterdir() if p.is_dir())
    assert versions == ["a-v0", "b-v1"]  # unchanged array reused, old version collected
    manifests = sorted(p.name for p in (tmp_path / "s.zarr" / "checkpoint").glob("manifest-*.json"))
    assert manifests == ["manifest-1.json"]


def test_corruption_and_identity_mismatch_raise(tmp_path):
    path = tmp_path / "s.zarr"
    ck = RunCheckpoint(path, identity={"seed": 1})
    ck.save(3, {"meta": {}, "arrays": {"a": np.arange(4.0)}})
    with pytest.raises(CheckpointError, match="different run"):
        RunCheckpoint(path, identity={"seed": 2}).load()
    # tamper with the data: checksum mismatch
    from privcube.storage.zarr_store import TensorStore

    TensorStore(path / "checkpoint").write("a-v3", np.arange(4.0) + 1)
    with pytest.raises(CheckpointError, match="checksum"):
        RunCheckpoint(path, identity={"seed": 1}).load()
    # corrupt manifest
    (path / "checkpoint" / "manifest-3.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        RunCheckpoint(path, identity={"seed": 1}).load()
    # dangling pointer
    (path / "checkpoint" / "CURRENT").write_text("manifest-9.json")
    with pytest.raises(CheckpointError, match="missing"):
        RunCheckpoint(path).load()


def test_mismatched_run_cannot_resume(tmp_path):
    ck = RunCheckpoint(tmp_path / "s.zarr")
    _run({"max_rounds": 1}, RunContext(checkpoint=ck))
    with pytest.raises(CheckpointError, match="does not match"):
        _run({"measure": "iid"}, RunContext(checkpoint=RunCheckpoint(tmp_path / "s.zarr"), resume=True))
    manifest = json.loads((tmp_path / "s.zarr" / "checkpoint" / "manifest-1.json").read_text())
    assert manifest["round"] == 1
