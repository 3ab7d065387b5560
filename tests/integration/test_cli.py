"""The command line end to end: contract of marginals / plan / run / demo, and one-line errors."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


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
    for args in ([], ["marginals"], ["plan"], ["run"], ["schema"], ["generate-census"], ["demo"]):
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


def test_plan_text_names_query_types_cost_and_measurements(tmp_path, small_data):
    """The text plan tells groups on the same attributes apart (query types, weight), prints the privacy
    cost β = 2ρ and lists the measurement plan (one line per residual with its noise variance)."""
    _, dom, _ = small_data
    cfg = write_config(tmp_path / "plan.yaml", None, dom, mechanism={"name": "querysmasher"},
                       workload=[{"attributes": ["a"]}, {"attributes": ["a"], "queries": "prefix", "weight": 3},
                                 {"attributes": ["a", "b"], "queries": "affine"}], privacy={"rho": 0.5})
    r = cli("plan", str(cfg))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "privacy cost (beta = 2 rho): 1" in lines
    groups = [ln.strip() for ln in lines if "rmse" in ln and ln.startswith("  ")]
    assert groups[0].startswith("a: rmse") and groups[1].startswith("a [a: prefix] weight 3: rmse")
    assert groups[2].startswith("a,b [a: affine, b: affine]: rmse")
    plan = json.loads(cli("plan", str(cfg), "--json").stdout)
    meas = lines[lines.index(f"measurements: {len(plan['measurements'])}") + 1:]
    assert len(meas) == len(plan["measurements"]) == 4  # residuals (), a, b, ab
    assert meas[0].startswith("  (total): sigma2 ") and any(m.startswith("  a,b: sigma2 ") for m in meas)


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
    assert "column 'b'" in r.stderr and "row 17" in r.stderr and "outside the domain" in r.stderr
    assert "value 9" not in r.stderr  # the value itself is never shown (issue 33)
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


@pytest.mark.slow  # about 45 s on 2 shared cores: two demos, each on its own LocalCluster
def test_demo_runs_on_a_local_cluster(tmp_path):
    r = cli("demo", "--out", str(tmp_path / "demo"), "--rows", "20000", "--workers", "2", "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr
    assert "outputs:" in r.stdout and "error summary" in r.stdout
    runs = list((tmp_path / "demo" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "ledger.json").exists() and (runs[0] / ".complete").exists()
    assert (runs[0] / "report.html").exists() and f"report: {runs[0] / 'report.html'}" in r.stdout
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


def test_cluster_flags_override_the_config_file(tmp_path, small_data, monkeypatch):
    """--workers / --scheduler-address / --scheduler-file reach the cluster resolver and beat the file's section.

    The cluster is not started: the handle records what it was asked for and lets the job run on dask's
    in-process scheduler, so this checks the CLI -> api.run -> resolve_cluster plumbing quickly.
    """
    from privcube.cli import main
    from privcube.graphs.cluster.handle import ClusterHandle

    parts, dom, _ = small_data
    cfg = write_config(tmp_path / "job.yaml", parts, dom,
                       cluster={"type": "local", "n_workers": 3, "memory_limit": "1GiB", "allow_insecure": True})
    asked: list[tuple[str, dict]] = []

    def record(self):  # noqa: ANN001, ANN202
        asked.append((self.type, dict(self.options), self.allow_insecure))

    monkeypatch.setattr(ClusterHandle, "__enter__", record)
    runs = {
        "workers": ["--workers", "2"],
        "address": ["--scheduler-address", "tcp://10.9.8.7:8786"],
        "file": ["--scheduler-file", str(tmp_path / "sched.json")],
    }
    for name, flags in runs.items():
        assert main(["run", str(cfg), "--out", str(tmp_path / name), "--seed", "1", "--quiet", *flags]) == 0
        assert (tmp_path / name / ".complete").exists()
    assert asked == [
        ("local", {"n_workers": 2, "memory_limit": "1GiB"}, True),
        ("address", {"address": "tcp://10.9.8.7:8786"}, True),  # the file's allow_insecure still applies
        ("scheduler-file", {"scheduler_file": str(tmp_path / "sched.json")}, True),
    ]
    assert main(["run", str(cfg), "--out", str(tmp_path / "none"), "--seed", "1", "--quiet"]) == 0
    assert asked[-1][:2] == ("local", {"n_workers": 3, "memory_limit": "1GiB"})  # no flag: the file decides


@pytest.mark.parametrize("workers", [None, 2], ids=["threads", "local-cluster"])
def test_data_error_names_column_file_and_row_but_no_value_or_count(tmp_path, workers):
    """An out-of-domain value found on a worker: the one-line error (and every worker log line, which reaches
    the CLI's stderr on a LocalCluster) names the column, the file and the row, but neither the value (issue 33)
    nor any count: not the rows, not a cell's count, not a partition's size."""
    rng = np.random.default_rng(23)
    total, planted = 5003, 1237  # distinctive: the 0-way marginal and the count of cell (a=1, b=2)
    rest = pd.DataFrame({"a": rng.choice([0, 2], total - planted), "b": rng.integers(0, 4, total - planted)})
    frame = pd.concat([rest, pd.DataFrame({"a": [1] * planted, "b": [2] * planted})], ignore_index=True)
    frame = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    frame.loc[4000, "b"] = 77  # out of the domain [0, 4)
    (tmp_path / "parts").mkdir()
    sizes = [len(x) for x in np.array_split(np.arange(total), 3)]
    for i, idx in enumerate(np.array_split(np.arange(total), 3)):
        frame.iloc[idx].to_parquet(tmp_path / "parts" / f"p{i}.parquet", index=False)
    dom = tmp_path / "domain.json"
    dom.write_text(json.dumps({"a": 3, "b": 4}))
    cfg = write_config(tmp_path / "job.yaml", tmp_path / "parts", dom, workload=[{"kway": 2}])
    flags = ["--workers", str(workers)] if workers else []
    r = cli("run", str(cfg), "--out", str(tmp_path / "run"), "--seed", "3", *flags)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("privcube: error:") and "column 'b'" in last and "p2.parquet', row 664" in last, last
    assert not re.search(r"(?<![\w.])77(?![\w.])", r.stdout + r.stderr)  # the value, nowhere
    counts = {total, planted, total - planted, *sizes}
    text = re.sub(r"line \d+", "", r.stdout + r.stderr)  # traceback line numbers are not data
    numbers = {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", text)}
    assert not (numbers & counts), sorted(numbers & counts)
    assert not (tmp_path / "run").exists()


def test_closed_pipe_is_not_a_traceback(tmp_path, small_data):
    """`privcube plan --json | head -1`: the reader leaves early; privcube stops without a traceback."""
    _, dom, _ = small_data
    cfg = write_config(tmp_path / "plan.yaml", None, dom, workload=[{"kway": 1}, {"kway": 2}, {"kway": 3}])
    for _ in range(3):  # the pipe breaks only when head exits before privcube has written everything
        p = subprocess.Popen([sys.executable, "-m", "privcube", "plan", str(cfg), "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        p.stdout.readline()
        p.stdout.close()  # before privcube writes the rest
        err = p.stderr.read()
        assert p.wait(timeout=120) in (0, 141) and "Traceback" not in err and "BrokenPipe" not in err, err
