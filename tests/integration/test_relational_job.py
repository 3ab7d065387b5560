"""`privcube run` with mechanism 'relational': CLI end to end, output contract, ledger, bad input."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.core.errors import BudgetError, ConfigError, DataError
from relational_files import EPS, FAST, REGIONS, _m2m_files, _o2m_files

SIZE_LABELS = ["[0, 10)", "[10, 100)", "[100, 1000)"]


def _cli(cfg: dict, folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "privcube", "run", str(path), "--out", str(out), "--seed", "3",
                           "--quiet", *extra], capture_output=True, text=True, timeout=120)


def test_cli_one_to_many_output_contract_and_ledger(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    out = tmp_path / "run"
    proc = _cli(cfg, tmp_path, out)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == [".complete", "config.yaml", "ledger.json", "report.html", "report.json", "synthetic/children.parquet",
                     "synthetic/links.parquet", "synthetic/parents.parquet"]
    par = pd.read_parquet(out / "synthetic/parents.parquet")
    ch = pd.read_parquet(out / "synthetic/children.parquet")
    # the links as their own file: (child key, parent key) pairs, one per child, the same as the FK column
    links = pd.read_parquet(out / "synthetic/links.parquet")
    assert list(links.columns) == ["children.session", "parents.id"] and len(links) == len(ch)
    assert links["children.session"].is_unique and set(links["children.session"]) == set(ch["session"])
    fk = dict(zip(ch["session"], ch["parent_id"]))
    assert all(fk[c] == p for c, p in zip(links["children.session"], links["parents.id"]))
    # shapes: same row counts as the input (n1, n2 public), key columns unique
    assert len(par) == 40 and len(ch) == 160
    assert par["id"].is_unique and ch["session"].is_unique
    # referential integrity: exactly one parent per child, every FK a parent key
    assert ch["parent_id"].notna().all() and ch["parent_id"].isin(set(par["id"])).all()
    assert list(par.columns) == ["id", "region", "size", "region_label", "size_label"]
    assert list(ch.columns) == ["session", "kind", "device", "hour", "parent_id", "kind_label", "hour_label"]
    # codes within the domain, labels decoded from the schema (expected labels written out by hand above)
    assert par["region"].between(0, 3).all() and par["size"].between(0, 2).all()
    assert (par["region_label"] == np.array(REGIONS)[par["region"]]).all()
    assert (par["size_label"] == np.array(SIZE_LABELS)[par["size"]]).all()
    hour_labels = np.array(["[0, 6)", "[6, 12)", "[12, 18)", "[18, 24)", "missing"])
    assert ch["hour"].between(0, 4).all() and (ch["hour_label"] == hour_labels[ch["hour"]]).all()
    assert ch["device"].between(0, 3).all() and "device_label" not in ch
    # ledger: basic composition of the three parts, ε1+ε2+ε_rel and δ1+δ2+δ_rel
    led = json.loads((out / "ledger.json").read_text())
    assert math.isclose(led["budget"]["epsilon"], 2.5, rel_tol=1e-12)
    assert math.isclose(led["budget"]["delta"], 4e-6, rel_tol=1e-12)
    assert math.isclose(led["spent"]["epsilon"], 2.5, rel_tol=1e-6)
    assert math.isclose(led["spent"]["delta"], 4e-6, rel_tol=1e-12)
    parts = led["composition"]["parts"]
    for n in ("parents", "children", "links"):
        assert math.isclose(parts[n]["spent"]["epsilon"], EPS[n], rel_tol=1e-6)
        assert math.isclose(parts[n]["spent"]["rho"], parts[n]["budget"]["rho"], rel_tol=1e-9)
    assert math.isclose(sum(c["rho"] for c in led["charges"]), led["spent"]["rho"], rel_tol=1e-12)
    assert led["composition"]["zcdp"]["epsilon"] < 2.5  # zCDP reading is tighter than basic composition
    assert led["noise"]["seed"] == 3
    # report: DP error present, no non-private evaluation or degree statistics by default
    rep = json.loads((out / "report.json").read_text())
    text = json.dumps(rep)
    assert "nonprivate_evaluation" not in rep["mechanism_report"] and "NOT differentially private" not in text
    assert rep["mechanism_report"]["degree"] == {"d_max": 10, "truncated": False, "links_kept": 160}
    # tiny data: the max_noise cap τ²m²(1−α)ρ/(d_max²·cells_min) = 0.0625·160²·0.8·0.02436/(100·9) ≈ 0.035
    # allows a single measurement (at least one is always made), instead of T·K = 6
    dp = rep["dp_error_measured_workloads"]
    assert dp["label"].startswith("DIFFERENTIALLY PRIVATE")
    assert not any("inferred from the private data" in w for w in rep.get("warnings", []))  # hand-written schemas
    assert dp["workloads"] == 1 and dp["average_l1_vs_noisy_pct"] >= 0
    assert rep["mechanism_report"]["privacy"]["shrinkage"] is True  # 'auto' shrinks when one measurement is noise
    conf = yaml.safe_load((out / "config.yaml").read_text())
    assert conf["mechanism"]["name"] == "relational" and conf["resolved"]["links"]["kind"] == "one_to_many"
    assert "error" not in proc.stderr.lower()
    # same seed, same output (through the API this time)
    again = api.run(tmp_path / "cfg.yaml", tmp_path / "run2", seed=3, quiet=True)
    pd.testing.assert_frame_equal(again.result.synthetic["children"], ch, check_dtype=False)


def test_cli_many_to_many_links_file(tmp_path: Path) -> None:
    cfg = _m2m_files(tmp_path)
    cfg["mechanism"]["evaluate_nonprivate"] = True
    out = tmp_path / "run"
    proc = _cli(cfg, tmp_path, out)
    assert proc.returncode == 0, proc.stderr
    assert (out / ".complete").exists()
    users = pd.read_parquet(out / "synthetic/users.parquet")
    movies = pd.read_parquet(out / "synthetic/movies.parquet")
    links = pd.read_parquet(out / "synthetic/links.parquet")
    assert list(users.columns) == ["uid", "age", "sex"] and list(movies.columns)[:1] == ["mid"]
    assert list(links.columns) == ["users.uid", "movies.mid"]
    # n1 = 50, n2 = 40 real and synthetic, so m_syn = m = 150 distinct pairs, every id a key
    assert len(links) == 150 and not links.duplicated().any()
    assert links["users.uid"].isin(set(users["uid"])).all() and links["movies.mid"].isin(set(movies["mid"])).all()
    assert users["age"].between(0, 4).all() and movies["g1"].between(0, 1).all()
    led = json.loads((out / "ledger.json").read_text())
    assert math.isclose(led["spent"]["delta"], 3e-6, rel_tol=1e-12)
    assert math.isclose(led["composition"]["parts"]["links"]["spent"]["rho"], 0.05, rel_tol=1e-9)
    rep = json.loads((out / "report.json").read_text())
    ev = rep["nonprivate_evaluation"]  # asked for explicitly, and labelled
    assert ev["label"].startswith("NON-PRIVATE") and "nonprivate_evaluation" not in rep["mechanism_report"]
    assert "NOT differentially private" in ev["note"] and ev["average_cross_error_pct"] >= 0


def _expect_refusal(cfg: dict, folder: Path, exc: type, match: str) -> None:
    out = folder / "out-refused"
    with pytest.raises(exc, match=match):
        _run_mapping(cfg, folder, out)
    assert not out.exists(), "a refused run must write nothing"


def _run_mapping(cfg: dict, folder: Path, out: Path) -> None:
    from privcube.api import run_job
    from privcube.jobs import load_job

    run_job(load_job(cfg, base=folder), out, seed=1, quiet=True)


def test_bad_input_refused_and_nothing_written(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    # a child pointing at an unknown parent id
    ch = pd.read_parquet(tmp_path / "children.parquet")
    ch.loc[5, "parent_id"] = "p999"
    ch.to_parquet(tmp_path / "orphans.parquet")
    bad = json.loads(json.dumps(cfg))
    bad["data"]["tables"]["children"]["path"] = "orphans.parquet"
    _expect_refusal(bad, tmp_path, DataError, r"^links: the children.parent_id value in row 5 is not a key of parents.id$")
    # a link table's id that is no key: named by the link file's own column
    m2m = _m2m_files(tmp_path)
    rt = pd.read_csv(tmp_path / "ratings.csv")
    rt.loc[9, "movie_id"] = 999999
    rt.to_csv(tmp_path / "ratings_dangling.csv", index=False)
    m2m["data"]["links"]["path"] = "ratings_dangling.csv"
    _expect_refusal(m2m, tmp_path, DataError,
                    r"^links: the link table column 'movie_id' value in row 9 is not a key of movies.mid$")
    # degree above d_max without truncation
    _expect_refusal({**cfg, "mechanism": {**FAST, "d_max": 4}}, tmp_path, DataError, r"a record has more links than d_max=4.*truncate")
    # ε ≤ 0 and a missing delta
    for e in (0, -1.0):
        b = json.loads(json.dumps(cfg))
        b["privacy"]["links"]["epsilon"] = e
        _expect_refusal(b, tmp_path, BudgetError, "privacy.links.*epsilon")
    b = json.loads(json.dumps(cfg))
    del b["privacy"]["tables"]["children"]["delta"]
    _expect_refusal(b, tmp_path, BudgetError, "privacy.tables.children.*delta")
    # missing table budget, unknown table in the links, missing file, missing column
    b = json.loads(json.dumps(cfg))
    del b["privacy"]["tables"]["parents"]
    _expect_refusal(b, tmp_path, BudgetError, "no budget for table 'parents'")
    _expect_refusal({**cfg, "data": {**cfg["data"], "links": {"from": "kids.parent_id", "to": "parents.id"}}},
                    tmp_path, ConfigError, "unknown table 'kids'")
    b = json.loads(json.dumps(cfg))
    b["data"]["tables"]["parents"]["path"] = "nope.parquet"
    _expect_refusal(b, tmp_path, DataError, "nope.parquet")
    b = json.loads(json.dumps(cfg))
    b["data"]["links"]["from"] = "children.owner"
    _expect_refusal(b, tmp_path, DataError, "column 'owner' is missing")
    b = json.loads(json.dumps(cfg))
    del b["data"]["tables"]["children"]
    _expect_refusal(b, tmp_path, ConfigError, "unknown table 'children'")
    b = json.loads(json.dumps(cfg))
    b["data"]["tables"]["extra"] = dict(b["data"]["tables"]["parents"])
    _expect_refusal(b, tmp_path, ConfigError, "two tables .or one table with self-referential links., got 3")
    # the CLI turns it into one line and exit code 2
    proc = _cli({**cfg, "mechanism": {**FAST, "d_max": 4}}, tmp_path, tmp_path / "cli-out")
    assert proc.returncode == 2 and not (tmp_path / "cli-out").exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and "d_max=4" in proc.stderr


def test_truncation_runs_and_withholds_counts(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    cfg["mechanism"] = {**FAST, "d_max": 4, "truncate": True, "iterations": 1}
    from privcube.api import run_job
    from privcube.jobs import load_job

    res = run_job(load_job(cfg, base=tmp_path), tmp_path / "o", seed=0, quiet=True)
    ch = res.result.synthetic["children"]
    deg = ch["parent_id"].value_counts()
    assert len(ch) < 160  # children whose link is truncated are dropped with it
    assert deg.max() >= 1 and ch["parent_id"].isin(set(res.result.synthetic["parents"]["id"])).all()
    assert res.report["mechanism_report"]["degree"] == {"d_max": 4, "truncated": True, "links_kept": len(ch)}
    # the kept count is published (the paper's model: the truncated data is the input): the report says so,
    # in a warning that does not depend on whether anything was dropped
    from privcube.relational.report_json import TRUNCATE_WARNING

    assert TRUNCATE_WARNING in res.report["warnings"] and "depends on the private degrees" in TRUNCATE_WARNING
    cfg["mechanism"] = {**FAST, "d_max": 50, "truncate": True, "iterations": 1}  # nothing above d_max: same warning
    res = run_job(load_job(cfg, base=tmp_path), tmp_path / "o50", seed=0, quiet=True)
    assert res.report["mechanism_report"]["degree"]["links_kept"] == 160
    assert res.report["warnings"][0] == TRUNCATE_WARNING


ISSUE_YAML = """
data:
  tables:
    parents:  {path: parents.parquet, schema: parents.yaml, key: id}
    children: {path: children.parquet, schema: children.yaml}
  links: {from: children.parent_id, to: parents.id}
mechanism: {name: relational, d_max: 50, iterations: 2, workloads_per_iteration: 2, slice_fraction: 0.5}
privacy:
  tables: {parents: {epsilon: 1, delta: 1e-6}, children: {epsilon: 1, delta: 1e-6}}
  links: {epsilon: 1, delta: 1e-6}
"""


def test_config_spelled_as_in_the_issue_runs(tmp_path: Path) -> None:
    """The issue's own YAML (keys d_max, iterations, workloads_per_iteration, slice_fraction; `delta: 1e-6`,
    which PyYAML reads as text) runs through the CLI: ledger ε1+ε2+ε_rel = 3, δ sum 3e-6."""
    _o2m_files(tmp_path)
    (tmp_path / "issue.yaml").write_text(ISSUE_YAML)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "privcube", "run", str(tmp_path / "issue.yaml"), "--out", str(out),
                           "--seed", "0", "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    led = json.loads((out / "ledger.json").read_text())
    assert math.isclose(led["spent"]["epsilon"], 3.0, rel_tol=1e-6) and math.isclose(led["spent"]["delta"], 3e-6)
    ch = pd.read_parquet(out / "synthetic/children.parquet")
    assert ch["parent_id"].isin(set(pd.read_parquet(out / "synthetic/parents.parquet")["id"])).all()
    rep = json.loads((out / "report.json").read_text())
    assert rep["mechanism_report"]["degree"] == {"d_max": 50, "truncated": False, "links_kept": 160}


def test_many_to_many_bad_links_and_parameters_write_nothing(tmp_path: Path) -> None:
    cfg = _m2m_files(tmp_path)
    ratings = pd.read_csv(tmp_path / "ratings.csv")
    ratings.loc[7, "movie_id"] = 4242  # not a movie key
    ratings.to_csv(tmp_path / "bad_ratings.csv", index=False)
    bad = json.loads(json.dumps(cfg))
    bad["data"]["links"]["path"] = "bad_ratings.csv"
    _expect_refusal(bad, tmp_path, DataError, r"value in row 7 is not a key of movies.mid$")
    bad = json.loads(json.dumps(cfg))
    bad["mechanism"]["slice_fraction"] = 2
    _expect_refusal(bad, tmp_path, ConfigError, "slice_fraction")
    bad = json.loads(json.dumps(cfg))
    bad["mechanism"]["synthetic_rows"] = {"films": 10}
    _expect_refusal(bad, tmp_path, ConfigError, "synthetic_rows.*films")
    bad = json.loads(json.dumps(cfg))
    bad["privacy"]["links"] = {"epsilon": -0.5, "delta": "1e-6"}
    _expect_refusal(bad, tmp_path, BudgetError, "privacy.links.*epsilon")


def test_private_degree_figures_only_in_the_nonprivate_section(tmp_path: Path) -> None:
    """With evaluate_nonprivate the real maximum degrees and dropped-link counts are reported, but only inside
    ``nonprivate_evaluation`` (labelled NON-PRIVATE); the public part of the report keeps the public three."""
    cfg = _o2m_files(tmp_path)
    cfg["mechanism"] = {**FAST, "d_max": 4, "truncate": True, "iterations": 1, "evaluate_nonprivate": True}
    out = tmp_path / "run"
    _run_mapping(cfg, tmp_path, out)
    rep = json.loads((out / "report.json").read_text())
    mech = rep["mechanism_report"]
    assert set(mech["degree"]) == {"d_max", "truncated", "links_kept"} and mech["links_input"] == {}
    assert "_nonprivate_input" not in mech and "nonprivate_withheld" not in mech
    private = rep["nonprivate_evaluation"]["input"]["degree"]
    assert private["links_dropped"] == private["links_in"] - mech["degree"]["links_kept"] > 0
    assert private["max_degree_parents"] > 4  # the real maximum, before truncation
    from privcube.report import render_report

    html = render_report(out)  # the page: the figures under the NON-PRIVATE section, not under Degrees
    assert html.count("links_dropped") == 1 and html.index("links_dropped") > html.index('<section id="nonprivate"')


def test_link_parquet_with_a_saved_pandas_index_has_two_columns(tmp_path: Path) -> None:
    """A link file written by pandas from a concatenated frame keeps its index as ``__index_level_0__``;
    it is the frame's index, not a third column, so the two id columns are found without ``columns``."""
    cfg = _m2m_files(tmp_path)
    rt = pd.read_csv(tmp_path / "ratings.csv")[["user_id", "movie_id"]]
    pd.concat([rt.iloc[::2], rt.iloc[1::2]]).to_parquet(tmp_path / "ratings.parquet")
    import pyarrow.parquet as pq

    assert "__index_level_0__" in pq.read_schema(tmp_path / "ratings.parquet").names
    cfg["data"]["links"] = {"path": "ratings.parquet", "left": "users.uid", "right": "movies.mid"}
    out = tmp_path / "run"
    _run_mapping(cfg, tmp_path, out)
    assert (out / ".complete").exists()
    assert len(pd.read_parquet(out / "synthetic" / "links.parquet")) == json.loads(
        (out / "report.json").read_text())["sizes"]["links_synthetic"] > 0
