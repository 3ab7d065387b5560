"""AIM+GReM checkpoints: resume after round k equals the uninterrupted run; corruption is detected."""
from __future__ import annotations

import json

import numpy as np
import pytest

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.core.errors import CheckpointError
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.storage.checkpoint import RunCheckpoint
from privcube.core.workload import Workload

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


# ------------------------------------------------------------------- append-only log and compaction
def _ckdir(path):
    return path / "store.zarr" / "checkpoint"


@pytest.mark.parametrize("max_log", [0, 2, 1000])
def test_resume_across_log_and_compactions_equals_uninterrupted(tmp_path, max_log):
    """Bases rewritten every round (0), every third round (2) or never (1000): resume is bit-identical."""
    full, full_ledger = _run({"measure": "crp"})
    rounds = full.report["rounds"]
    k = rounds // 2 + 1
    ck = RunCheckpoint(tmp_path / "store.zarr", identity={"seed": 5}, max_log=max_log)
    _run({"max_rounds": k}, RunContext(checkpoint=ck))
    rnd, state = RunCheckpoint(tmp_path / "store.zarr", identity={"seed": 5}).load()
    assert rnd == k
    base = state["meta"]["round"]
    assert [r["round"] for r in state["log"]] == list(range(base + 1, k + 1))
    assert len(state["log"]) <= max_log and (max_log == 0 or base < k)
    if max_log == 1000:
        assert base == 0 and "replay" in state["meta"]  # the first base holds the init measurements only
        assert not any(n.startswith("mu.") for n in state["arrays"])
    res, ledger = _run({}, RunContext(checkpoint=RunCheckpoint(tmp_path / "store.zarr", identity={"seed": 5},
                                                                max_log=max_log), resume=True))
    assert res.report["trace"] == full.report["trace"]
    assert ledger.charges == full_ledger.charges
    for a, b in zip(res.answers, full.answers):
        assert np.array_equal(a.estimate, b.estimate) and np.array_equal(a.variance, b.variance)
    for name in ("residual", "precision"):
        got = {n: v for n, v in res.tensors.items() if name in n}
        want = {n: v for n, v in full.tensors.items() if name in n}
        assert got.keys() == want.keys() and all(np.array_equal(got[n], want[n]) for n in got)


def test_a_round_appends_one_record_and_a_constant_size_manifest(tmp_path):
    """O(change): after the first base, a round writes one record and a manifest that does not grow;
    the base's arrays and meta file are not touched again."""
    ck = RunCheckpoint(tmp_path / "store.zarr")
    sizes, records = {}, {}
    real = RunCheckpoint.append

    def spy(self, rnd, record):  # noqa: ANN001, ANN202
        self.wait()  # the run writes on the checkpoint's writer thread: compare what is on disk
        before = {p.name: p.stat().st_mtime_ns for p in _ckdir(tmp_path).iterdir() if not p.name.startswith("log-")
                  and not p.name.startswith("manifest-") and p.name != "CURRENT"}
        real(self, rnd, record)
        self.wait()
        after = {p.name: p.stat().st_mtime_ns for p in _ckdir(tmp_path).iterdir() if not p.name.startswith("log-")
                 and not p.name.startswith("manifest-") and p.name != "CURRENT"}
        assert after == before  # base arrays and meta untouched
        sizes[rnd] = (_ckdir(tmp_path) / f"manifest-{rnd}.json").stat().st_size
        records[rnd] = sorted(p.name for p in _ckdir(tmp_path).glob("log-*.rec"))

    RunCheckpoint.append = spy
    try:
        res, _ = _run({}, RunContext(checkpoint=ck))
    finally:
        RunCheckpoint.append = real
    rounds = res.report["rounds"]
    assert sorted(sizes) == list(range(1, rounds + 1))
    assert max(sizes.values()) - min(sizes.values()) <= 16  # only digits of round/count/checksum differ
    assert records[rounds] == sorted(f"log-{r}.rec" for r in range(1, rounds + 1))
    # a record holds only its round: one trace row, that round's two charges, its measurements
    from privcube.storage.checkpoint import decode_record

    for r in (1, rounds):
        rec = decode_record((_ckdir(tmp_path) / f"log-{r}.rec").read_bytes(), "test")
        assert [t["round"] for t in rec["meta"]["trace"]] == [r]
        want = [f"aim-grem round {r} final"] if r == rounds else [f"aim-grem round {r} select",
                                                                   f"aim-grem round {r} measure"]
        assert [c["label"] for c in rec["meta"]["charges"]] == want  # the last round: spread, no selection
        measured = rec["meta"]["measurements"]
        assert len(rec["arrays"]) == len(measured) >= 1
        assert {tuple(t) for t, _ in measured} == {tuple(t) for t in rec["meta"]["trace"][0]["measured"]}
    assert len(list(_ckdir(tmp_path).glob("manifest-*.json"))) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "meta"])
def test_damaged_log_is_refused(tmp_path, damage):
    ck = RunCheckpoint(tmp_path / "store.zarr")
    _run({"max_rounds": 3}, RunContext(checkpoint=ck))
    d = _ckdir(tmp_path)
    rec = min(d.glob("log-*.rec"), key=lambda p: int(p.stem[4:]))  # rounds committed together share a file
    if damage == "flip":
        data = bytearray(rec.read_bytes())
        data[-3] ^= 0xFF
        rec.write_bytes(bytes(data))
    elif damage == "truncate":
        rec.write_bytes(rec.read_bytes()[:-8])
    elif damage == "missing":
        rec.unlink()
    else:
        meta = next(d.glob("meta-*.json"))
        meta.write_text(meta.read_text().replace('"round": 0', '"round": 1', 1))
    want = {"flip": "checksum", "truncate": "checksum", "missing": "missing", "meta": "checksum"}[damage]
    with pytest.raises(CheckpointError, match=want) as info:
        RunCheckpoint(tmp_path / "store.zarr").load()
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError):
        _run({}, RunContext(checkpoint=RunCheckpoint(tmp_path / "store.zarr"), resume=True))


def test_crash_between_record_and_pointer_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """The record and manifest of round k are written but the pointer switch fails: round k-1 stays
    committed and loadable, and a retry of round k overwrites the orphans and commits."""
    import os

    ck = RunCheckpoint(tmp_path / "store.zarr")
    _run({"max_rounds": 2}, RunContext(checkpoint=ck))
    real = os.replace

    def failing(src, dst, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if os.fsdecode(dst).endswith("CURRENT"):
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **k)

    ck2 = RunCheckpoint(tmp_path / "store.zarr")
    rnd, state = ck2.load()
    assert rnd == 2
    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        ck2.append(3, {"meta": {"x": 1}, "arrays": {"y": np.arange(3.0)}})
    monkeypatch.setattr(os, "replace", real)
    assert (_ckdir(tmp_path) / "log-3.rec").exists()  # the orphan
    rnd, state2 = RunCheckpoint(tmp_path / "store.zarr").load()
    assert rnd == 2 and len(state2["log"]) == len(state["log"])
    ck3 = RunCheckpoint(tmp_path / "store.zarr")
    ck3.load()
    ck3.append(3, {"meta": {"x": 2}, "arrays": {"y": np.arange(4.0)}})
    rnd, state3 = RunCheckpoint(tmp_path / "store.zarr").load()
    assert rnd == 3 and state3["log"][-1]["meta"] == {"x": 2}
    assert np.array_equal(state3["log"][-1]["arrays"]["y"], np.arange(4.0))
    with pytest.raises(CheckpointError, match="not after"):
        ck3.append(3, {"meta": {}, "arrays": {}})


def test_record_roundtrip_keeps_dtypes_shapes_and_zero_d(tmp_path):
    ck = RunCheckpoint(tmp_path / "s.zarr")
    with pytest.raises(CheckpointError, match="save first"):
        ck.append(1, {"meta": {}, "arrays": {}})
    ck.save(0, {"meta": {"m": 0}, "arrays": {"a": np.ones(2)}})
    arrays = {"s": np.array(2.5), "v": np.arange(5, dtype=np.int32), "m": np.arange(6.0).reshape(2, 3).T}
    ck.append(1, {"meta": {"k": [1]}, "arrays": arrays})
    ck.append(4, {"meta": {"k": [4]}, "arrays": {}})
    rnd, state = RunCheckpoint(tmp_path / "s.zarr").load()
    assert rnd == 4 and state["meta"] == {"m": 0} and [r["round"] for r in state["log"]] == [1, 4]
    got = state["log"][0]["arrays"]
    for n, a in arrays.items():
        assert got[n].dtype == a.dtype and got[n].shape == a.shape and np.array_equal(got[n], a)
    ck.save(5, {"meta": {"m": 5}, "arrays": {"a": np.ones(2)}})  # compaction: the log is dropped
    assert not list((tmp_path / "s.zarr" / "checkpoint").glob("log-*.rec"))
    assert RunCheckpoint(tmp_path / "s.zarr").load()[1]["log"] == []


def test_v1_checkpoint_still_loads_and_the_next_save_starts_a_v2_base(tmp_path):
    """A checkpoint written by the previous format (full snapshot, meta inline) resumes; appending needs a
    new base first, which ``should_compact`` asks for."""
    import json as _json

    from privcube.storage.checkpoint import FORMAT_V1, checksum
    from privcube.storage.zarr_store import TensorStore

    path = tmp_path / "s.zarr"
    a = np.arange(4.0)
    TensorStore(path)
    TensorStore(path / "checkpoint").write("a-v2", a)
    manifest = {"format": FORMAT_V1, "round": 2, "identity": {}, "meta": {"k": 1},
                "arrays": {"a": {"version": "a-v2", "shape": [4], "dtype": a.dtype.str, "checksum": checksum(a)}}}
    (path / "checkpoint" / "manifest-2.json").write_text(_json.dumps(manifest))
    (path / "checkpoint" / "CURRENT").write_text("manifest-2.json")
    ck = RunCheckpoint(path)
    rnd, state = ck.load()
    assert rnd == 2 and state["meta"] == {"k": 1} and state["log"] == [] and np.array_equal(state["arrays"]["a"], a)
    assert ck.should_compact()
    with pytest.raises(CheckpointError, match="save first"):
        ck.append(3, {"meta": {}, "arrays": {}})
    ck.save(3, {"meta": {"k": 2}, "arrays": {"a": a}})
    ck.append(4, {"meta": {"r": 4}, "arrays": {}})
    rnd, state = RunCheckpoint(path).load()
    assert rnd == 4 and state["meta"] == {"k": 2} and [r["meta"] for r in state["log"]] == [{"r": 4}]


def test_compaction_policy(tmp_path):
    """Compact when the log would outgrow compact_ratio x the snapshot size (at least 1 MiB) or max_log."""
    ck = RunCheckpoint(tmp_path / "s.zarr", max_log=3, compact_ratio=1.0)
    assert ck.should_compact()  # nothing to append to yet
    ck.save(0, {"meta": {}, "arrays": {"a": np.zeros(4)}})
    assert not ck.should_compact()
    ck.append(1, {"meta": {}, "arrays": {"y": np.zeros(75_000)}})  # 600 kB of log
    assert not ck.should_compact(0, state_bytes=0)  # small states count as 1 MiB
    assert ck.should_compact(600_000, state_bytes=0)
    assert not ck.should_compact(600_000, state_bytes=10_000_000)
    fresh = RunCheckpoint(tmp_path / "s.zarr", max_log=3)  # a resumed process sees the same log size
    assert fresh.should_compact(600_000, state_bytes=0) and not fresh.should_compact(0, state_bytes=0)
    ck.append(2, {"meta": {}, "arrays": {}})
    ck.append(3, {"meta": {}, "arrays": {}})
    assert ck.should_compact(0, state_bytes=10**9)  # max_log records


# ------------------------------------------------------------------- background commits (writer thread)
def _rounds(ck, n):  # noqa: ANN001, ANN202
    ck.save(0, {"meta": {"m": 0}, "arrays": {"a": np.arange(3.0)}}, frozen=True)
    for r in range(1, n + 1):
        ck.append(r, {"meta": {"r": r}, "arrays": {"y": np.full(r, float(r)), "s": np.array(r)}})


def test_background_commits_load_like_synchronous_ones_and_coalesce(tmp_path, monkeypatch):
    """Appends queued faster than the disk are committed together (fewer files, one pointer switch) and load
    exactly as synchronous per-round commits do; leaving the block waits for every queued commit."""
    import threading

    from privcube.storage import checkpoint as ckmod

    _rounds(RunCheckpoint(tmp_path / "sync.zarr"), 12)
    gate = threading.Event()
    real = ckmod._commit_appends
    batches = []

    def slow(batch):  # noqa: ANN001, ANN202 - the first commit waits until every round is queued
        gate.wait(10)
        batches.append(len(batch))
        real(batch)

    monkeypatch.setattr(ckmod, "_commit_appends", slow)
    bg = RunCheckpoint(tmp_path / "bg.zarr")
    with bg.background():
        _rounds(bg, 12)
        assert bg.should_compact() is False and bg._head["log_count"] == 12  # bookkeeping is not deferred
        gate.set()
    assert sum(batches) == 12 and len(batches) < 12  # committed together
    assert len(list(_ckdir_of(tmp_path / "bg.zarr").glob("log-*.rec"))) == len(batches)
    want, got = RunCheckpoint(tmp_path / "sync.zarr").load(), RunCheckpoint(tmp_path / "bg.zarr").load()
    assert want[0] == got[0] == 12 and want[1]["meta"] == got[1]["meta"]
    assert [r["round"] for r in got[1]["log"]] == list(range(1, 13))
    for a, b in zip(want[1]["log"], got[1]["log"]):
        assert a["meta"] == b["meta"] and a["arrays"].keys() == b["arrays"].keys()
        assert all(np.array_equal(a["arrays"][k], b["arrays"][k]) for k in a["arrays"])


def _ckdir_of(store):  # noqa: ANN001, ANN202
    return store / "checkpoint"


def test_background_write_error_is_raised_and_the_last_commit_kept(tmp_path, monkeypatch):
    """A commit failing on the writer thread (disk full at the pointer switch) is raised to the caller when
    it leaves the block; what was committed before stays committed and loads; nothing after it is written."""
    import errno
    import os

    ck = RunCheckpoint(tmp_path / "s.zarr")
    _rounds(ck, 2)
    real = os.replace

    def full(src, dst, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if os.fsdecode(dst).endswith("CURRENT"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        with ck.background():
            ck.append(3, {"meta": {"r": 3}, "arrays": {}})
    monkeypatch.setattr(os, "replace", real)
    rnd, state = RunCheckpoint(tmp_path / "s.zarr").load()
    assert rnd == 2 and [r["round"] for r in state["log"]] == [1, 2]
    ck.append(3, {"meta": {"r": 3}, "arrays": {}})  # the bookkeeping was dropped: re-read, then commit
    assert RunCheckpoint(tmp_path / "s.zarr").load()[0] == 3
