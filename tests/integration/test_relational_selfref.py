"""Self-referential links: one table linked to itself (directed, no self-loops by default), end to end."""
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

from privcube.core.errors import ConfigError, DataError
from privcube.relational.stages.run import run_relational
from privcube.relational.stages.cross_workloads import cross_workloads
from privcube.privacy.noise import NoiseSource
from privcube.privacy.primitives import gaussian_sigma
from privcube.privacy.zcdp import cdp_rho
from privcube.relational.example_data import self_referential_like

FAST = {"d_max": 4, "iterations": 3, "pgd_iters": 30, "candidates": 60, "slice_fraction": 1.0,
        "max_noise": None}  # the paper's equal split: these small tables would fail the max_noise check
BUDGETS = {"tables": {"people": {"epsilon": 1.0, "delta": 1e-6}}, "links": {"epsilon": 10.0, "delta": 1e-6}}


@pytest.fixture(scope="module")
def sr() -> dict:
    return self_referential_like(60, seed=0)


def test_generator_is_directed_without_self_loops(sr: dict) -> None:
    pairs = sr["links"]["pairs"]
    assert len(sr["tables"]) == 1 and not (pairs["child_id"] == pairs["parent_id"]).any()
    assert not pairs.duplicated().any()
    assert pairs["child_id"].value_counts().max() <= 4 and pairs["parent_id"].value_counts().max() <= 4


def test_self_referential_integrity_no_self_loops_and_ledger(sr: dict) -> None:
    people = sr["tables"]["people"][0]
    m = len(sr["links"]["pairs"])
    res = run_relational(sr["tables"], sr["links"], {**FAST, "evaluate_nonprivate": True}, BUDGETS, noise=NoiseSource(4))
    # one synthetic table, synthesized once; links between it and itself under the input's column names
    assert list(res.tables) == ["people"] and len(res.tables["people"]) == len(people)
    links = res.links
    assert list(links.columns) == ["child_id", "parent_id"]
    ids = set(res.tables["people"]["id"])
    assert len(links) == m and not links.duplicated().any()  # m_syn = m (same table size), distinct pairs
    assert links["child_id"].isin(ids).all() and links["parent_id"].isin(ids).all()
    assert not (links["child_id"] == links["parent_id"]).any()  # self-loops excluded
    # directed: both (S1, S2) and (S2, S1) are workloads; sensitivity doubled (record on both ends)
    dom = sr["tables"]["people"][1]
    assert res.report["cross_workloads"] == len(cross_workloads(dom, dom, 3)) == 2 * 4 * math.comb(4, 2)  # (1, 2) and (2, 1) splits
    assert res.report["self_referential"] == {"directed": True, "self_loops": False, "sensitivity_degree": 8}
    pr = res.report["privacy"]
    l2 = math.sqrt(2.0) * 8 / m
    assert math.isclose(pr["noise_std"], gaussian_sigma((1 - pr["alpha"]) * pr["epsilon0"] ** 2 / 2, l2), rel_tol=1e-12)
    # ledger: one table budget plus the links, exactly (nothing for a second table)
    rho_t, rho_l = cdp_rho(1.0, 1e-6), cdp_rho(10.0, 1e-6)
    assert math.isclose(res.report["ledger_rho_spent"], rho_t + rho_l, rel_tol=1e-9)
    assert set(pr["rho_tables"]) == {"people"}
    ev = res.report["nonprivate_evaluation"]
    assert ev["average_cross_error_pct"] < ev["initial_random_links_error_pct"]  # learned beats random at eps 10


def test_self_loops_policy(sr: dict) -> None:
    pairs = sr["links"]["pairs"]
    first = int(pairs["child_id"].iloc[0])
    looped = {**sr["links"], "pairs": pd.concat([pairs, pd.DataFrame({"child_id": [first], "parent_id": [first]})],
                                                ignore_index=True)}
    with pytest.raises(DataError, match=r"a record of table 'people' links to itself.*self_loops: true"):
        run_relational(sr["tables"], looped, FAST, BUDGETS, noise=NoiseSource(0))
    res = run_relational(sr["tables"], looped, {**FAST, "self_loops": True, "iterations": 1}, BUDGETS,
                         noise=NoiseSource(0))
    assert len(res.links) == len(looped["pairs"]) and res.report["self_referential"]["self_loops"] is True
    with pytest.raises(ConfigError, match="foreign key into the same table"):
        run_relational({"people": sr["tables"]["people"]}, {"from": "people.id", "to": "people.id"}, FAST, BUDGETS)


def _files(folder: Path) -> dict:
    sr = self_referential_like(40, seed=2)
    people = sr["tables"]["people"][0].rename(columns={"id": "pid"})
    people["pid"] = [f"x{v}" for v in people["pid"]]  # text ids
    people["race"] = np.array(["a", "b", "c", "d"])[people["race"]]
    people.to_parquet(folder / "people.parquet")
    pairs = sr["links"]["pairs"].rename(columns={"child_id": "kid", "parent_id": "parent"})
    (pairs.map(lambda v: f"x{v}")).to_csv(folder / "family.csv", index=False)
    (folder / "people.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "race", "type": "categorical", "categories": ["a", "b", "c", "d"]},
        {"name": "age", "type": "integer", "size": 6}, {"name": "sex", "type": "integer", "size": 2},
        {"name": "education", "type": "integer", "size": 4}]}))
    return {"data": {"tables": {"people": {"path": "people.parquet", "schema": "people.yaml", "key": "pid"}},
                     "links": {"path": "family.csv", "left": "people.pid", "right": "people.pid"}},
            "mechanism": {"name": "relational", **FAST},
            "privacy": {"tables": {"people": {"epsilon": 1.0, "delta": 1e-6}}, "links": {"epsilon": 2.0, "delta": 1e-6}}}


def test_cli_self_referential_end_to_end(tmp_path: Path) -> None:
    cfg = _files(tmp_path)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "privcube", "run", str(path), "--out", str(out), "--seed", "1",
                           "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == [".complete", "config.yaml", "ledger.json", "report.html", "report.json", "synthetic/links.parquet",
                     "synthetic/people.parquet"]
    people = pd.read_parquet(out / "synthetic/people.parquet")
    links = pd.read_parquet(out / "synthetic/links.parquet")
    real = pd.read_csv(tmp_path / "family.csv")
    assert list(links.columns) == ["kid", "parent"] and len(links) == len(real)
    assert links.isin(set(people["pid"])).all().all() and not (links["kid"] == links["parent"]).any()
    assert not links.duplicated().any() and set(people["race_label"]) <= {"a", "b", "c", "d"}
    led = json.loads((out / "ledger.json").read_text())
    assert set(led["composition"]["parts"]) == {"people", "links"}
    assert math.isclose(led["spent"]["epsilon"], 3.0, rel_tol=1e-9)  # ε_people + ε_rel
    assert math.isclose(led["spent"]["delta"], 2e-6, rel_tol=1e-12)
    assert math.isclose(led["spent"]["rho"], cdp_rho(1.0, 1e-6) + cdp_rho(2.0, 1e-6), rel_tol=1e-9)
    assert led["spent"]["rho"] <= led["budget"]["rho"] * (1 + 1e-12)
    rep = json.loads((out / "report.json").read_text())
    assert rep["self_referential"]["directed"] is True


def test_config_errors_for_one_table(tmp_path: Path) -> None:
    from privcube.api import run_job
    from privcube.jobs import load_job

    cfg = _files(tmp_path)
    bad = json.loads(json.dumps(cfg))
    bad["data"]["links"] = {"from": "people.pid", "to": "people.pid"}
    with pytest.raises(ConfigError, match="foreign key into the same table"):
        run_job(load_job(bad, base=tmp_path), tmp_path / "o1", seed=0, quiet=True)
    bad = json.loads(json.dumps(cfg))
    bad["data"]["links"]["right"] = "movies.mid"
    with pytest.raises(ConfigError, match="unknown table 'movies'"):
        run_job(load_job(bad, base=tmp_path), tmp_path / "o2", seed=0, quiet=True)
    bad = json.loads(json.dumps(cfg))
    bad["data"]["tables"]["other"] = dict(bad["data"]["tables"]["people"])
    bad["privacy"]["tables"]["other"] = {"epsilon": 1.0, "delta": 1e-6}
    with pytest.raises(ConfigError, match=r"leave table\(s\) \['other'\] unlinked"):
        run_job(load_job(bad, base=tmp_path), tmp_path / "o4", seed=0, quiet=True)
    # a self-loop in the file: a clear error (no record id: it is private), nothing written
    fam = pd.read_csv(tmp_path / "family.csv")
    pd.concat([fam, pd.DataFrame({"kid": ["x10"], "parent": ["x10"]})]).to_csv(tmp_path / "loop.csv", index=False)
    bad = json.loads(json.dumps(cfg))
    bad["data"]["links"]["path"] = "loop.csv"
    with pytest.raises(DataError, match="a record of table 'people' links to itself") as e:
        run_job(load_job(bad, base=tmp_path), tmp_path / "o3", seed=0, quiet=True)
    assert "x10" not in str(e.value)  # a record id is private
    assert not any((tmp_path / f"o{k}").exists() for k in (1, 2, 3, 4))
