"""The shipped Airbnb job (benchmarks/configs/airbnb): the config and schemas validate; a small sample runs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from privcube.config import read_config_file
from privcube.relational.config import load_relational_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "airbnb" / "relational.yaml"
DATA = ROOT.parent / "shared" / "data" / "airbnb"


def test_shipped_config_validates_with_explicit_bins() -> None:
    raw, base = read_config_file(CONFIG)
    job = load_relational_config(raw, base)  # reads schemas, never data
    assert job.links.kind == "one_to_many" and (job.links.left, job.links.right) == ("sessions", "users")
    assert job.links.left_col == "user_id" and job.tables["users"].key == "id"
    # data paths resolve against the config's folder to ../shared/data/airbnb beside the project root
    assert Path(job.tables["users"].path) == (DATA / "users.csv").resolve()
    assert Path(job.tables["sessions"].path) == (DATA / "sessions.csv").resolve()
    users, sessions = job.tables["users"].schema, job.tables["sessions"].schema
    # every attribute is explicit (categories or bins), never an integer code read off the data
    assert all(a.kind in ("categorical", "numeric", "date") for s in (users, sessions) for a in s)
    assert users.attribute("age").missing == "code" and users.attribute("age").bins[-2:] == (120.0, 2100.0)
    assert users.attribute("date_first_booking").kind == "date" and users.attribute("date_first_booking").missing == "code"
    assert sessions.attribute("secs_elapsed").missing == "code" and sessions.attribute("action_type").missing == "code"
    assert math.isclose(job.total.epsilon, 3.0) and math.isclose(job.total.delta, 3e-6)
    assert job.params["d_max"] == 50


@pytest.mark.skipif(not (DATA / "users.csv").exists() or not (DATA / "sessions.csv").exists(),
                    reason=f"the Airbnb data is not present at {DATA} (shared data folder beside the project)")
def test_shipped_config_runs_on_a_sample(tmp_path: Path) -> None:
    from privcube.api import run_job
    from privcube.jobs import load_job

    raw, base = read_config_file(CONFIG)
    users = pd.read_csv(DATA / "users.csv", dtype=str, keep_default_na=False, na_values=[""]).iloc[:400]
    sessions = pd.read_csv(DATA / "sessions.csv", dtype=str, keep_default_na=False, na_values=[""])
    sessions = sessions[sessions["user_id"].isin(set(users["id"]))]
    assert len(sessions) > 100
    users.to_csv(tmp_path / "users.csv", index=False)
    sessions.to_csv(tmp_path / "sessions.csv", index=False)
    for t in ("users", "sessions"):
        raw["data"]["tables"][t]["path"] = str(tmp_path / f"{t}.csv")
        raw["data"]["tables"][t]["schema"] = str(base / raw["data"]["tables"][t]["schema"])
    raw["mechanism"].update({"iterations": 2, "pgd_iters": 20, "candidates": 40, "max_noise": None})
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    res = run_job(load_job(raw, base=tmp_path), out, seed=0, quiet=True)
    syn_u = pd.read_parquet(out / "synthetic/users.parquet")
    syn_s = pd.read_parquet(out / "synthetic/sessions.parquet")
    assert len(syn_u) == len(users) and len(syn_s) == len(sessions)
    assert syn_s["user_id"].isin(set(syn_u["id"])).all()  # referential integrity, one parent each
    # decoded labels come from the shipped schema (bins and categories, "missing" for the missing code)
    assert set(syn_u["age_label"]) <= {"[0, 18)", "[18, 25)", "[25, 30)", "[30, 35)", "[35, 45)", "[45, 55)",
                                       "[55, 65)", "[65, 120)", "[120, 2100)", "missing"}
    assert set(syn_s["secs_elapsed_label"]) <= {"[0, 10)", "[10, 60)", "[60, 300)", "[300, 1800)", "[1800, 10800)",
                                               "[10800, 86400)", "[86400, 10000000)", "missing"}
    led = json.loads((out / "ledger.json").read_text())
    assert math.isclose(led["spent"]["epsilon"], 3.0, rel_tol=1e-9) and led["spent"]["rho"] <= led["budget"]["rho"] * (1 + 1e-12)
    assert res.report["kind"] == "one_to_many"
