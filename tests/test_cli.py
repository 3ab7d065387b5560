"""The command line end to end: contract of marginals / plan / run / demo, and one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> tuple[Path, Path, pd.DataFrame]:
    """A small integer-coded dataset split over three Parquet files, with its domain JSON."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(7)
    n = 3000
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = rng.integers(0, 2, n)
    frame = pd.DataFrame({"c": c, "a": a, "b": b})  # column order differs from the domain's
    (folder / "parts").mkdir()
    for i, idx in enumerate(np.array_split(np.arange(n), 3)):
        frame.iloc[idx].to_parquet(folder / "parts" / f"p{i}.parquet", index=False)
    dom = folder / "domain.json"
    dom.write_text(json.dumps({"a": 3, "b": 4, "c": 2}))
    return folder / "parts", dom, frame


def write_config(path: Path, data: Path | None, dom: Path, **over) -> Path:
    cfg = {
        "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 1}, {"kway": 2}],
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "cluster": {"type": "threads"},
    }
    cfg["data"] = {"path": str(data), "domain": str(dom)} if data else None
    if data is None:
        cfg.pop("data")
        cfg["domain"] = json.loads(dom.read_text())
    cfg.update(over)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_help_everywhere():
    for args in ([], ["marginals"], ["plan"], ["run"], ["schema"], ["demo"]):
        r = cli(*args, "--help")
        assert r.returncode == 0, r.stderr
        assert "usage: privcube" in r.stdout


def test_marginals_contract(tmp_path, small_data):
    parts, dom, frame = small_data
    out = tmp_path / "m.parquet"
    r = cli("marginals", str(parts), "--schema", str(dom), "--attrs", "b,a", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "NON-PRIVATE" in r.stdout
    t = pd.read_parquet(out)
    assert list(t.columns) == ["b", "a", "count"]
    assert len(t) == 12 and t["count"].dtype == np.int64
    truth = frame.groupby(["b", "a"]).size()
    for row in t.itertuples():
        assert row.count == truth.get((row.b, row.a), 0)


def test_marginals_unknown_attribute_is_one_line(tmp_path, small_data):
    parts, dom, _ = small_data
    r = cli("marginals", str(parts), "--schema", str(dom), "--attrs", "a,zz", "--out", str(tmp_path / "x.parquet"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "zz" in r.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_plan_json_without_data(tmp_path, small_data):
    _, dom, _ = small_data
    cfg = write_config(tmp_path / "plan.yaml", None, dom)
    r = cli("plan", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mechanism"] == "residual-planner"
    assert out["rmse"] > 0 and {"rho", "epsilon", "delta"} <= set(out["privacy"])
    assert [g["attributes"] for g in out["groups"]][:3] == [["a"], ["b"], ["c"]]
    assert all(g["rmse"] > 0 for g in out["groups"])


def test_run_contract_and_refusal(tmp_path, small_data):
    parts, dom, frame = small_data
    cfg = write_config(tmp_path / "job.yaml", parts, dom)
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "11", "--quiet")
    assert r.returncode == 0, r.stderr
    ledger = json.loads((out / "ledger.json").read_text())
    for key in ("budget", "spent"):
        assert {"rho", "epsilon", "delta"} <= set(ledger[key])
    assert ledger["spent"]["rho"] <= ledger["budget"]["rho"] * (1 + 1e-9)
    assert ledger["charges"]
    assert (out / "config.yaml").exists() and (out / "report.json").exists() and (out / "store.zarr").exists()
    index = json.loads((out / "answers" / "index.json").read_text())["groups"]
    assert len(index) == 6
    ab = next(g for g in index if g["attributes"] == ["a", "b"])
    t = pd.read_parquet(out / "answers" / ab["file"])
    assert list(t.columns)[:4] == ["a", "b", "estimate", "variance"] and len(t) == 12
    # the noisy total should be near the true one at epsilon = 1
    assert abs(t["estimate"].sum() - len(frame)) < 200
    report = json.loads((out / "report.json").read_text())
    assert report["noise"]["seeded"] is True and report["noise"]["seed"] == 11
    # a finished run is refused
    r2 = cli("run", str(cfg), "--out", str(out), "--quiet")
    assert r2.returncode == 2 and "finished run" in r2.stderr
    # ... unless told to: --overwrite replaces it (and a failing replacement keeps the old run)
    bad = write_config(tmp_path / "bad.yaml", parts.parent / "nowhere", dom)
    r3 = cli("run", str(bad), "--out", str(out), "--overwrite", "--quiet")
    assert r3.returncode == 2 and json.loads((out / "ledger.json").read_text()) == ledger
    r4 = cli("run", str(cfg), "--out", str(out), "--seed", "12", "--overwrite", "--quiet")
    assert r4.returncode == 0, r4.stderr
    assert json.loads((out / "report.json").read_text())["noise"]["seed"] == 12
    assert not list(out.parent.glob(f".{out.name}.replaced-*"))


def test_run_same_seed_same_answers(tmp_path, small_data):
    parts, dom, _ = small_data
    cfg = write_config(tmp_path / "job.yaml", parts, dom, workload=[{"kway": 2}])
    tables = []
    for name in ("r1", "r2"):
        r = cli("run", str(cfg), "--out", str(tmp_path / name), "--seed", "5", "--quiet")
        assert r.returncode == 0, r.stderr
        idx = json.loads((tmp_path / name / "answers" / "index.json").read_text())["groups"]
        tables.append(pd.read_parquet(tmp_path / name / "answers" / idx[0]["file"]))
    pd.testing.assert_frame_equal(tables[0], tables[1])


@pytest.mark.parametrize(
    ("privacy", "needle"),
    [({"epsilon": 0, "delta": 1e-6}, "epsilon"), ({"epsilon": 1, "delta": 2}, "delta")],
)
def test_run_bad_budget_writes_nothing(tmp_path, small_data, privacy, needle):
    parts, dom, _ = small_data
    cfg = write_config(tmp_path / "job.yaml", parts, dom, privacy=privacy)
    r = cli("run", str(cfg), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and needle in r.stderr
    assert not (tmp_path / "out").exists()


def test_run_out_of_domain_value_writes_nothing(tmp_path, small_data):
    parts, dom, frame = small_data
    bad = tmp_path / "bad"
    bad.mkdir()
    f = frame.copy()
    f.loc[17, "b"] = 9
    f.to_parquet(bad / "p.parquet", index=False)
    cfg = write_config(tmp_path / "job.yaml", bad, dom)
    r = cli("run", str(cfg), "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 2, r.stderr
    assert "'b'" in r.stderr and "9" in r.stderr
    assert not (tmp_path / "out").exists()


def test_run_missing_column_writes_nothing(tmp_path, small_data):
    parts, dom, frame = small_data
    bad = tmp_path / "bad"
    bad.mkdir()
    frame.drop(columns=["c"]).to_parquet(bad / "p.parquet", index=False)
    cfg = write_config(tmp_path / "job.yaml", bad, dom)
    r = cli("run", str(cfg), "--out", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 2 and "'c'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_demo_runs_on_a_local_cluster(tmp_path):
    r = cli("demo", "--out", str(tmp_path / "demo"), "--rows", "20000", "--workers", "2", "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr
    assert "outputs:" in r.stdout and "error summary" in r.stdout
    runs = list((tmp_path / "demo" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "ledger.json").exists() and (runs[0] / ".complete").exists()
    # a second demo makes a new run folder next to the first
    r2 = cli("demo", "--out", str(tmp_path / "demo"), "--rows", "20000", "--workers", "1", "--quiet", timeout=600)
    assert r2.returncode == 0, r2.stderr
    assert len(list((tmp_path / "demo" / "runs").iterdir())) == 2


@pytest.mark.parametrize(
    ("mechanism", "workload"),
    [
        ({"name": "querysmasher"}, [{"kway": 2, "queries": {"a": "prefix", "default": "identity"}}]),
        ({"name": "hdmm", "restarts": 1}, [{"kway": 2, "queries": {"b": "prefix", "default": "identity"}}]),
        ({"name": "eigen-design"}, [{"attributes": ["a", "b"], "queries": "affine"}, {"kway": 1}]),
        ({"name": "aim-grem"}, [{"kway": 2}]),
    ],
    ids=["querysmasher", "hdmm", "eigen-design", "aim-grem"],
)
def test_every_mechanism_runs_through_the_cli(tmp_path, small_data, mechanism, workload):
    parts, dom, _ = small_data
    cfg = write_config(tmp_path / "job.yaml", parts, dom, mechanism=mechanism, workload=workload)
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    ledger = json.loads((out / "ledger.json").read_text())
    assert 0 < ledger["spent"]["rho"] <= ledger["budget"]["rho"] * (1 + 1e-9)
    index = json.loads((out / "answers" / "index.json").read_text())["groups"]
    assert len(index) >= 1
    for g in index:
        t = pd.read_parquet(out / "answers" / g["file"])
        assert len(t) == g["rows"] and np.isfinite(t["estimate"]).all()
    if mechanism["name"] != "aim-grem":
        p = cli("plan", str(cfg), "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["mechanism"] == mechanism["name"]
