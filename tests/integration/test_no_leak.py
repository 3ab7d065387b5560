"""No exact count leaves a run: every file of the run directory and every output line is searched.

The data hold a planted cell whose exact count (7919) occurs nowhere else, and a distinctive total
(30042 rows). After complete runs of every single-table mechanism (AIM+GReM and ResidualPlanner also
with discrete noise), an AIM+GReM run on a LocalCluster and a killed-and-resumed AIM+GReM run, no file (raw bytes as int32/int64/float32/float64, numbers in text, decoded zarr arrays and
checkpoint log records, and Parquet columns) and no stdout/stderr line may contain either count, and
no stored array may equal an exact marginal. Every file and folder of a run directory is owner-only.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import signal
import stat
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
import zarr

from privcube.storage.checkpoint import split_records

DOMAIN = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
PLANTED = 7919          # exact count of the cell a=2, b=3 (and of a=2): no other cell has it
TOTAL = 30042           # number of rows: the exact 0-way marginal
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
MECHANISMS = ("aim-grem", "residual-planner", "querysmasher", "hdmm", "eigen-design")


def cli(*args: str, env: dict[str, str] | None = None, stop_after: int | None = None) -> subprocess.CompletedProcess:
    """The privcube command; with ``stop_after=k`` SIGKILLed right after committing checkpoint round k
    (tests/support/checkpoint_kill.py)."""
    e = dict(os.environ)
    e.update(env or {})
    head = [sys.executable, "-m", "privcube"] if stop_after is None else [
        sys.executable, str(Path(__file__).resolve().parents[1] / "support" / "checkpoint_kill.py"), str(stop_after)]
    return subprocess.run([*head, *args], capture_output=True, timeout=300, env=e)


def planted_frame() -> pd.DataFrame:
    rng = np.random.default_rng(17)
    m = TOTAL - PLANTED
    a = rng.integers(0, 2, m)
    b = (a + rng.integers(0, 3, m)) % 4
    rest = pd.DataFrame({"a": a, "b": b, "c": rng.integers(0, 2, m), "d": (b + rng.integers(0, 2, m)) % 5,
                         "e": rng.integers(0, 3, m)})
    planted = pd.DataFrame({"a": 2, "b": 3, "c": rng.integers(0, 2, PLANTED), "d": rng.integers(0, 5, PLANTED),
                            "e": rng.integers(0, 3, PLANTED)})
    return pd.concat([rest, planted], ignore_index=True).sample(frac=1.0, random_state=3)


def exact_marginals(frame: pd.DataFrame) -> dict[tuple[str, ...], np.ndarray]:
    out = {}
    attrs = list(DOMAIN)
    for k in (0, 1, 2, 3):
        for c in itertools.combinations(attrs, k):
            shape = tuple(DOMAIN[x] for x in c)
            idx = np.ravel_multi_index([frame[x].to_numpy() for x in c], shape) if c else np.zeros(len(frame), int)
            out[c] = np.bincount(idx, minlength=int(np.prod(shape))).reshape(shape)
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("leak")
    frame = planted_frame()
    assert len(frame) == TOTAL
    truth = exact_marginals(frame)
    hits = [c for c, m in truth.items() if (m == PLANTED).any()]
    assert set(hits) == {("a",), ("a", "b")}  # the planted count is the planted cell (and a=2)
    assert ((truth[("a", "b")] == PLANTED).sum(), truth[("a",)][2]) == (1, PLANTED)
    assert not any((m == TOTAL).any() for c, m in truth.items() if c)
    (folder / "data").mkdir()
    frame.to_parquet(folder / "data" / "p.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    cfgs = {}
    for mech in MECHANISMS:
        cfg = {"mechanism": {"name": mech}, "workload": [{"kway": 2}],
               "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": {"type": "threads"},
               "data": {"path": str(folder / "data"), "domain": str(folder / "domain.json")}}
        cfgs[mech] = folder / f"{mech}.yaml"
        cfgs[mech].write_text(yaml.safe_dump(cfg))
    return folder, cfgs, truth


# ------------------------------------------------------------------------------------------ searching
def _byte_patterns(n: int) -> dict[str, bytes]:
    return {"int64": struct.pack("<q", n), "int32": struct.pack("<i", n), "int64be": struct.pack(">q", n),
            "float64": struct.pack("<d", float(n)), "float32": struct.pack("<f", float(n)),
            "float64be": struct.pack(">d", float(n))}


def text_numbers(data: bytes) -> set[float]:
    vals = set()
    for tok in NUMBER.findall(data):
        try:
            vals.add(float(tok))
        except ValueError:
            pass
    return vals


def leaks_in_bytes(data: bytes, where: str) -> list[str]:
    found = []
    for n in (PLANTED, TOTAL):
        found += [f"{where}: {n} as raw {kind}" for kind, pat in _byte_patterns(n).items() if pat in data]
        if float(n) in text_numbers(data):
            found.append(f"{where}: {n} as text")
    return found


def zarr_arrays(root: Path) -> list[Path]:
    """Every zarr v3 array under ``root`` (hidden temporaries included)."""
    out = []
    for meta in root.rglob("zarr.json"):
        try:
            if json.loads(meta.read_text()).get("node_type") == "array":
                out.append(meta.parent)
        except (OSError, json.JSONDecodeError):
            continue
    return out


def leaks_in_array(arr: np.ndarray, where: str, truth) -> list[str]:  # noqa: ANN001
    found = []
    if arr.dtype.kind not in "iufb":
        return found
    for n in (PLANTED, TOTAL):
        if np.any(arr == n):
            found.append(f"{where}: holds {n}")
    for c, m in truth.items():
        if m.size > 1 and arr.size == m.size and np.array_equal(np.ravel(arr).astype(float), m.ravel().astype(float)):
            found.append(f"{where}: equals the exact marginal on {c}")
    return found


def search_run(out: Path, truth) -> list[str]:  # noqa: ANN001
    found = []
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for p in files:
        found += leaks_in_bytes(p.read_bytes(), str(p.relative_to(out)))
        if p.suffix == ".parquet":
            table = pq.read_table(p).to_pandas()
            for col in table.columns:
                if table[col].dtype.kind in "iufb":
                    found += leaks_in_array(table[col].to_numpy(), f"{p.relative_to(out)}[{col}]", truth)
    for p in out.rglob("log-*.rec"):  # checkpoint log records (one or several a file): decode their arrays too
        for _, rec in split_records(p.read_bytes(), str(p)):
            for name, arr in rec["arrays"].items():
                found += leaks_in_array(arr, f"{p.relative_to(out)}[{name}]", truth)
    arrays = zarr_arrays(out)
    assert arrays
    for a in arrays:
        found += leaks_in_array(np.asarray(zarr.open_array(str(a), mode="r")[...]), str(a.relative_to(out)), truth)
    return found


def permission_problems(out: Path) -> list[str]:
    bad = []
    for p in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(os.lstat(p).st_mode)
        want = 0o700 if p.is_dir() else 0o600
        if mode != want:
            bad.append(f"{p.relative_to(out)}: {oct(mode)} (want {oct(want)})")
    return bad


# ---------------------------------------------------------------------------------------------- tests
def test_search_finds_a_planted_leak(tmp_path, setup):
    """The searches themselves work: an exact count written any of these ways is found."""
    _, _, truth = setup
    from privcube.storage.zarr_store import TensorStore

    (tmp_path / "r.json").write_text(json.dumps({"x": float(PLANTED)}))
    (tmp_path / "t.bin").write_bytes(b"abc" + struct.pack("<q", TOTAL))
    TensorStore(tmp_path / "s.zarr").write("m", truth[("b", "c")].astype(float))
    TensorStore(tmp_path / "s.zarr").write("p", np.array([1.5, PLANTED], dtype=float))
    from privcube.storage.checkpoint import encode_record

    (tmp_path / "log-1.rec").write_bytes(encode_record(1, {}, {}, {"y.0": truth[("c", "d")].astype(float) * 1.0}))
    found = search_run(tmp_path, truth)
    assert any("r.json" in f for f in found) and any("t.bin" in f for f in found)
    assert any("log-1.rec[y.0]: equals the exact marginal on ('c', 'd')" in f for f in found)
    assert any("exact marginal on ('b', 'c')" in f for f in found) and any("holds 7919" in f for f in found)
    (tmp_path / "ok.json").write_text(json.dumps({"x": 7919.25, "y": "27919.5", "z": 0.7919}))
    assert not leaks_in_bytes((tmp_path / "ok.json").read_bytes(), "ok.json")


# discrete noise is for integer-valued measurements (counts), not for real-valued strategies
@pytest.mark.parametrize("mech, sampler", [(m, "continuous") for m in MECHANISMS]
                         + [("aim-grem", "discrete"), ("residual-planner", "discrete")])
def test_complete_run_leaks_no_exact_count(tmp_path, setup, mech, sampler):
    _, cfgs, truth = setup
    out = tmp_path / "run"
    cfg = cfgs[mech]
    if sampler == "discrete":
        cfg = tmp_path / "discrete.yaml"
        cfg.write_text(yaml.safe_dump({**yaml.safe_load(cfgs[mech].read_text()), "noise_sampler": "discrete"}))
    r = cli("run", str(cfg), "--out", str(out), "--seed", "4")  # progress on: stderr is searched too
    assert r.returncode == 0, r.stderr.decode()
    assert (out / ".complete").exists()
    found = search_run(out, truth) + leaks_in_bytes(r.stdout, "stdout") + leaks_in_bytes(r.stderr, "stderr")
    assert not found, found
    assert not permission_problems(out), permission_problems(out)


def test_killed_and_resumed_run_leaks_no_exact_count(tmp_path, setup):
    _, cfgs, truth = setup
    out = tmp_path / "run"
    r1 = cli("run", str(cfgs["aim-grem"]), "--out", str(out), stop_after=3)
    assert r1.returncode == -signal.SIGKILL, r1.stderr.decode()
    # the checkpoint as the kill left it: noisy state only, owner-only; its log files hold the records of
    # rounds 1-3 (rounds queued back to back on the writer thread share a file)
    logs = (out / "store.zarr" / "checkpoint").glob("log-*.rec")
    assert sorted(rec["round"] for p in logs for _, rec in split_records(p.read_bytes(), str(p))) == [1, 2, 3]
    found = search_run(out, truth) + leaks_in_bytes(r1.stdout, "stdout") + leaks_in_bytes(r1.stderr, "stderr")
    assert not found, found
    assert not permission_problems(out), permission_problems(out)
    r2 = cli("run", str(cfgs["aim-grem"]), "--out", str(out), "--resume")
    assert r2.returncode == 0, r2.stderr.decode()
    found = search_run(out, truth) + leaks_in_bytes(r2.stdout, "stdout") + leaks_in_bytes(r2.stderr, "stderr")
    assert not found, found
    assert not permission_problems(out), permission_problems(out)


def test_local_cluster_run_leaks_no_exact_count(tmp_path, setup):
    """AIM+GReM on a LocalCluster of worker processes (exact marginals on the workers, their log lines on
    stderr): nothing exact in the run directory, on stdout/stderr, or left in the temp folder."""
    _, cfgs, truth = setup
    raw = yaml.safe_load(cfgs["aim-grem"].read_text())
    raw["cluster"] = {"type": "local", "memory_limit": "1GiB"}
    raw["mechanism"]["distribute_min_cells"] = 1  # estimates and exact marginals sharded on the workers
    cfg = tmp_path / "local.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "4", "--workers", "2", env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr.decode()
    found = search_run(out, truth) + leaks_in_bytes(r.stdout, "stdout") + leaks_in_bytes(r.stderr, "stderr")
    assert not found, found
    assert not permission_problems(out), permission_problems(out)
    assert list(tmp.rglob("*")) == []  # the private spill folder went with the cluster


def test_run_leaves_the_process_umask_alone(tmp_path, setup):
    from privcube import api

    _, cfgs, _ = setup
    old = os.umask(0o022)
    try:
        api.run(cfgs["residual-planner"], tmp_path / "run", seed=1, quiet=True)
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)
    assert not permission_problems(tmp_path / "run")
