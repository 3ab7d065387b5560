"""Per-link degree bounds (issue 36, item 1): ``privacy.links.<name>.d_max`` / ``truncate`` beside a link's
budget, defaulting to the job's; each link runs, plans and reports with its own bound; a bound larger than
the child's domain holds is reported."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube import api
from privcube.core.errors import BudgetError, ConfigError, DataError

FAST = {"name": "relational", "d_max": 10, "iterations": 2, "pgd_iters": 20, "candidates": 50}


def _graph(folder: Path, seed: int = 0, devices_per_user: int = 2) -> dict:
    """users (40) <- sessions (120, at most 8 a user) and users <- devices (each user 0..``devices_per_user``
    distinct device types of 3)."""
    rng = np.random.default_rng(seed)
    n_u = 40
    uid = np.array([f"u{k:03d}" for k in range(n_u)])
    pd.DataFrame({"id": uid, "age": rng.integers(0, 4, n_u), "region": rng.integers(0, 3, n_u)}).to_parquet(
        folder / "users.parquet")
    su = np.repeat(np.arange(n_u), 3)  # 3 sessions a user
    pd.DataFrame({"user_id": uid[su], "device": rng.integers(0, 3, su.size), "hour": rng.integers(0, 4, su.size)}
                 ).to_parquet(folder / "sessions.parquet")
    rows = []
    for u in range(n_u):
        k = int(rng.integers(0, devices_per_user + 1))
        rows += [(uid[u], int(d)) for d in rng.choice(3, size=min(k, 3), replace=False)]
    pd.DataFrame(rows, columns=["user_id", "kind"]).to_parquet(folder / "devices.parquet")
    return {"data": {"tables": {"users": {"path": "users.parquet", "domain": {"age": 4, "region": 3}, "key": "id"},
                                "sessions": {"path": "sessions.parquet", "domain": {"device": 3, "hour": 4}},
                                "devices": {"path": "devices.parquet", "domain": {"kind": 3}}},
                     "links": [{"from": "sessions.user_id", "to": "users.id"},
                               {"from": "devices.user_id", "to": "users.id"}]},
            "mechanism": dict(FAST),
            "privacy": {"tables": {n: {"epsilon": 1.0, "delta": 1e-6} for n in ("users", "sessions", "devices")},
                        "links": {"sessions.user_id": {"epsilon": 1.0, "delta": 1e-6},
                                  "devices.user_id": {"epsilon": 1.0, "delta": 1e-6, "d_max": 2}}}}


def _run(cfg: dict, folder: Path, name: str = "run", seed: int = 3) -> Path:
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    privcube.run(folder / "cfg.yaml", folder / name, seed=seed, quiet=True)
    return folder / name


def test_each_link_runs_with_its_own_bound(tmp_path: Path) -> None:
    """devices.user_id carries d_max 2, sessions.user_id the job's 10: each link's report and charges use its
    own bound, no synthetic user has more than 2 devices, and the resolved config records both bounds."""
    out = _run(_graph(tmp_path), tmp_path)
    dev = pd.read_parquet(out / "synthetic/devices.parquet")
    assert np.bincount(dev["user_id"].to_numpy()).max() <= 2
    rep = json.loads((out / "report.json").read_text())
    by = {lk["from"]: lk["mechanism_report"] for lk in rep["links"]}
    assert by["devices.user_id"]["degree"]["d_max"] == 2 and by["sessions.user_id"]["degree"]["d_max"] == 10
    assert by["devices.user_id"]["degrees"]["d_max_respected"] is True
    # the release's count noise follows the bound: σ·m = √2·d_max/√(2ρ) for every measurement of a link
    led = json.loads((out / "ledger.json").read_text())
    m = {"devices.user_id": len(dev), "sessions.user_id": 120}
    for c in led["charges"]:
        if ":links:measure" in c["label"]:
            name = c["label"].split(":")[1]
            d_max = 2 if name == "devices.user_id" else 10
            assert math.isclose(c["sigma"] * m[name], math.sqrt(2) * d_max / math.sqrt(2 * c["rho"]), rel_tol=1e-9)
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["resolved"]["degree_bounds"] == {"sessions.user_id": {"d_max": 10, "truncate": False},
                                                "devices.user_id": {"d_max": 2, "truncate": False}}
    # 3 device kinds hold at most 3 distinct rows a user: 2 is within the domain, so no bound warning
    assert not any("distinct rows" in w for w in rep.get("warnings", []))


def test_a_link_bound_breaks_only_its_own_link(tmp_path: Path) -> None:
    """Users with 2 devices under devices' d_max 1: refused with one line naming the table and the bound
    (never a degree); with that link's ``truncate: true`` the job runs, warns for that link only, and
    sessions (3 a user, job d_max 10) are untouched."""
    cfg = _graph(tmp_path)
    uid = [f"u{k:03d}" for k in range(30)]  # 31 devices on 40 users: room for d_max 1; u000 has two
    pd.DataFrame({"user_id": [uid[0], *uid], "kind": [0, *([1] * 30)]}).to_parquet(tmp_path / "devices.parquet")
    cfg["privacy"]["links"]["devices.user_id"]["d_max"] = 1
    with pytest.raises(DataError) as e:
        _run(cfg, tmp_path, "refused")
    msg = str(e.value)
    assert "d_max=1" in msg and "'users'" in msg and "\n" not in msg and "u0" not in msg
    assert not (tmp_path / "refused").exists()
    cfg["privacy"]["links"]["devices.user_id"]["truncate"] = True
    out = _run(cfg, tmp_path)
    rep = json.loads((out / "report.json").read_text())
    assert any(w.startswith("link(s) ['devices.user_id']: truncate: true") for w in rep["warnings"])
    by = {lk["from"]: lk["mechanism_report"] for lk in rep["links"]}
    assert by["devices.user_id"]["degree"]["truncated"] is True and by["sessions.user_id"]["degree"]["truncated"] is False
    assert len(pd.read_parquet(out / "synthetic/sessions.parquet")) == 120
    assert np.bincount(pd.read_parquet(out / "synthetic/devices.parquet")["user_id"]).max() <= 1


def test_two_table_form_takes_the_bound_beside_the_links_budget() -> None:
    """In the two-table form ``privacy.links.d_max`` overrides ``mechanism.d_max`` for its one link."""
    from privcube.relational.config import load_relational_config

    raw = {"data": {"tables": {"u": {"path": "u.parquet", "domain": {"a": 2}, "key": "id"},
                               "s": {"path": "s.parquet", "domain": {"b": 3}}},
                    "links": {"from": "s.uid", "to": "u.id"}},
           "mechanism": {"name": "relational", "d_max": 50},
           "privacy": {"tables": {"u": {"epsilon": 1, "delta": 1e-6}, "s": {"epsilon": 1, "delta": 1e-6}},
                       "links": {"epsilon": 1, "delta": 1e-6, "d_max": 4}}}
    job = load_relational_config(raw, ".")
    assert job.link_params()["d_max"] == 4 and job.params["d_max"] == 50
    assert job.parts["links"].epsilon == 1  # the budget itself is read without the bound keys
    # the mechanism's bound stays the default of a link that gives none
    del raw["privacy"]["links"]["d_max"]
    assert load_relational_config(raw, ".").link_params()["d_max"] == 50


BAD = [
    ("zero", {"d_max": 0}, ConfigError, "privacy.links.devices.user_id.d_max"),
    ("text", {"d_max": "3"}, ConfigError, "privacy.links.devices.user_id.d_max"),
    ("bool", {"d_max": True}, ConfigError, "privacy.links.devices.user_id.d_max"),
    ("truncate", {"truncate": "yes"}, ConfigError, "privacy.links.devices.user_id.truncate"),
    ("unknown", {"dmax": 3}, BudgetError, "'dmax'"),
]


@pytest.mark.parametrize("case,edit,exc,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_link_bounds_one_line(tmp_path: Path, case: str, edit: dict, exc: type, needle: str) -> None:
    cfg = _graph(tmp_path)
    cfg["privacy"]["links"]["devices.user_id"].update(edit)
    with pytest.raises(exc) as e:
        _run(cfg, tmp_path)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg
    assert not (tmp_path / "run").exists()


def test_plan_shows_each_links_noise_with_its_bound_and_a_bound_beyond_the_domain(tmp_path: Path) -> None:
    """The plan's count noise per link follows its own d_max (σ·m = d_max/√ρ: 5× apart for 10 and 2 at equal
    budgets), and a bound above the distinct rows of the child's domain (devices: 3 kinds, job d_max 10) is
    said beside that link, in the plan and as a run warning."""
    cfg = _graph(tmp_path)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    plan = api.plan(tmp_path / "cfg.yaml", links=100)
    lps = {lp["link"].split(" ")[0]: lp for lp in plan.details["links"]}
    ses, dev = lps["sessions.user_id"], lps["devices.user_id"]
    assert (ses["d_max"], dev["d_max"]) == (10, 2)
    assert math.isclose(ses["count_noise_std"], 10 / math.sqrt(ses["rho_per_measurement"]), rel_tol=1e-12)
    assert math.isclose(dev["count_noise_std"], 2 / math.sqrt(dev["rho_per_measurement"]), rel_tol=1e-12)
    assert "distinct rows" not in dev.get("warning", "")
    wide = copy.deepcopy(cfg)
    del wide["privacy"]["links"]["devices.user_id"]["d_max"]
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(wide))
    plan = api.plan(tmp_path / "cfg.yaml", links=100)
    dev = {lp["link"].split(" ")[0]: lp for lp in plan.details["links"]}["devices.user_id"]
    assert "d_max 10 is larger than the 3 distinct rows" in dev["warning"]
    assert "privacy.links.devices.user_id.d_max: 3" in dev["warning"]
    out = _run(wide, tmp_path, "wide")
    warnings = json.loads((out / "report.json").read_text())["warnings"]
    assert sum("distinct rows the domain of table 'devices'" in w for w in warnings) == 1
    assert not any("table 'sessions'" in w for w in warnings)  # 12 distinct sessions rows ≥ d_max 10
