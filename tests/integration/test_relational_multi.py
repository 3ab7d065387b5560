"""Relational jobs over a schema graph (list form of data.links): users <- sessions, users <- bookings,
and a chain users <- sessions <- events, run end to end through ``privcube.run``."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

import privcube
from privcube.core.errors import BudgetError, ConfigError, DataError
from relational_files import LINK_BUD, _check_ledger, _files



def _run(cfg: dict, folder: Path, name: str = "run", seed: int = 5) -> Path:
    out = folder / name
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))  # relative paths resolve against the config's folder
    privcube.run(folder / "cfg.yaml", out, seed=seed, quiet=True)
    return out


def test_three_tables_end_to_end(tmp_path: Path) -> None:
    cfg = _files(tmp_path)
    out = _run(cfg, tmp_path)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and "synthetic" in p.parts)
    assert names == ["synthetic/bookings.parquet", "synthetic/links/bookings.user_id.parquet",
                     "synthetic/links/sessions.user_id.parquet", "synthetic/sessions.parquet", "synthetic/users.parquet"]
    users = pd.read_parquet(out / "synthetic/users.parquet")
    sess = pd.read_parquet(out / "synthetic/sessions.parquet")
    book = pd.read_parquet(out / "synthetic/bookings.parquet")
    # one link file per foreign key: (child key, parent key) pairs, the same links as the child's FK column
    for child, frame, key, fname in ((sess, "sessions", "sid", "sessions.user_id"), (book, "bookings", "id",
                                                                                     "bookings.user_id")):
        pairs = pd.read_parquet(out / f"synthetic/links/{fname}.parquet")
        assert list(pairs.columns) == [f"{frame}.{key}", "users.id"] and len(pairs) == len(child)
        merged = child[[key, "user_id"]].merge(pairs, left_on=key, right_on=f"{frame}.{key}", validate="one_to_one")
        assert len(merged) == len(child) and (merged["user_id"] == merged["users.id"]).all()
    assert (len(users), len(sess), len(book)) == (40, 120, 60)
    assert list(users.columns) == ["id", "age", "region"]
    assert list(sess.columns) == ["sid", "device", "hour", "user_id"]
    assert list(book.columns) == ["id", "kind", "user_id"]
    # referential integrity: every child's FK is a key of the synthetic parent
    assert users["id"].is_unique and sess["sid"].is_unique
    assert sess["user_id"].isin(set(users["id"])).all() and book["user_id"].isin(set(users["id"])).all()
    led = _check_ledger(out, ["users", "sessions", "bookings", "sessions.user_id", "bookings.user_id"])
    # each link spent its own budget, under its own label
    comp = led["composition"]["parts"]
    for n in ("sessions.user_id", "bookings.user_id"):
        assert math.isclose(comp[n]["budget"]["epsilon"], LINK_BUD[n][0], rel_tol=1e-12)
        assert any(c["label"].startswith(f"link:{n}:links:") for c in led["charges"])
    rep = json.loads((out / "report.json").read_text())
    assert rep["kind"] == "schema_graph"
    assert [lk["from"] for lk in rep["links"]] == ["sessions.user_id", "bookings.user_id"]
    for lk in rep["links"]:
        assert math.isclose(lk["budget"]["epsilon"], LINK_BUD[lk["from"]][0], rel_tol=1e-12)
        assert lk["dp_error_measured_workloads"]["label"].startswith("DIFFERENTIALLY PRIVATE")
        assert lk["file"] == f"synthetic/links/{lk['from']}.parquet" and lk["spent"]["rho"] > 0
    # seeded: the same run again gives the same tables
    again = _run(cfg, tmp_path, "again")
    pd.testing.assert_frame_equal(pd.read_parquet(again / "synthetic/bookings.parquet"), book)


def test_chain_and_public_table(tmp_path: Path) -> None:
    cfg = _files(tmp_path, chain=True)
    cfg["privacy"]["tables"]["users"] = "public"
    out = _run(cfg, tmp_path)
    users = pd.read_parquet(out / "synthetic/users.parquet")
    sess = pd.read_parquet(out / "synthetic/sessions.parquet")
    ev = pd.read_parquet(out / "synthetic/events.parquet")
    assert ev["session_id"].isin(set(sess["sid"])).all() and sess["user_id"].isin(set(users["id"])).all()
    assert list(sess.columns) == ["sid", "device", "hour", "user_id"]
    real = pd.read_parquet(tmp_path / "users.parquet")
    # public: the real rows as given, in a random order (``test_relational_public_order``)
    assert sorted(map(tuple, users[["age", "region"]].to_numpy())) == sorted(map(tuple, real[["age", "region"]].to_numpy()))
    led = _check_ledger(out, ["sessions", "bookings", "events", "sessions.user_id", "bookings.user_id",
                              "events.session_id"])
    assert not any(c["label"].startswith("table:users:") for c in led["charges"])
    rep = json.loads((out / "report.json").read_text())
    assert rep["public_tables"] == ["users"] and rep["tables"]["users"]["public"] is True


def _bad(cfg: dict, edit) -> dict:
    cfg = copy.deepcopy(cfg)
    edit(cfg)
    return cfg


BAD = [
    ("from_table", lambda c: c["data"]["links"][1].update({"from": "nope.user_id"}), ConfigError, "data.links[1].from"),
    ("to_not_key", lambda c: c["data"]["links"][0].update({"to": "users.region"}), ConfigError, "data.links[0].to"),
    ("missing_link_budget", lambda c: c["privacy"]["links"].pop("bookings.user_id"), BudgetError, "bookings.user_id"),
    ("extra_link_budget", lambda c: c["privacy"]["links"].update({"sessions.sid": {"epsilon": 1, "delta": 1e-6}}),
     ConfigError, "sessions.sid"),
    ("single_links_budget", lambda c: c["privacy"].update({"links": {"epsilon": 1, "delta": 1e-6}}), BudgetError,
     "privacy.links"),
    ("same_column_twice", lambda c: c["data"]["links"].append({"from": "sessions.user_id", "to": "users.id"}),
     ConfigError, "sessions.user_id"),
    ("cycle", lambda c: c["data"]["links"].append({"from": "users.home", "to": "sessions.sid"}), ConfigError, "cycle"),
    ("table_in_no_link", lambda c: c["data"]["links"].pop(1), ConfigError, "'bookings'"),
    ("item_keys", lambda c: c["data"]["links"][0].update({"path": "x.parquet"}), ConfigError, "data.links[0]"),
    ("public_resized", lambda c: (c["privacy"]["tables"].update({"users": "public"}),
                                  c["mechanism"].update({"synthetic_rows": {"users": 10}})),
     ConfigError, "synthetic_rows"),
]


@pytest.mark.parametrize("case,edit,exc,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_graph_configs(tmp_path: Path, case: str, edit, exc: type, needle: str) -> None:
    cfg = _bad(_files(tmp_path), edit)
    out = tmp_path / "run"
    with pytest.raises(exc) as e:
        _run(cfg, tmp_path)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and "u0" not in msg
    assert not out.exists()


def test_missing_fk_column_names_it(tmp_path: Path) -> None:
    def edit(c: dict) -> None:
        c["data"]["links"][1]["from"] = "bookings.owner"
        c["privacy"]["links"]["bookings.owner"] = c["privacy"]["links"].pop("bookings.user_id")

    cfg = _bad(_files(tmp_path), edit)
    with pytest.raises(DataError) as e:
        _run(cfg, tmp_path)
    assert "'owner'" in str(e.value) and "bookings" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("crash_after", [1, 3])  # 1: two tables done; 3: three tables and the first link done
def test_killed_graph_run_resumes_to_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     crash_after: int) -> None:
    from checkpoint_kill import Crash, after_commit
    from checkpoint_kill import crash_after as crash_after_round

    cfg = _files(tmp_path)
    ref = _run(cfg, tmp_path, "ref")
    after_commit(monkeypatch, crash_after_round(crash_after))
    with pytest.raises(Crash):
        _run(cfg, tmp_path, "got")
    monkeypatch.undo()
    assert (tmp_path / "got" / "checkpoint").exists() and not (tmp_path / "got" / "ledger.json").exists()
    privcube.run(tmp_path / "cfg.yaml", tmp_path / "got", seed=5, resume=True, quiet=True)
    got = tmp_path / "got"
    assert (got / ".complete").exists() and not (got / "checkpoint").exists()
    for name in ("users", "sessions", "bookings"):
        pd.testing.assert_frame_equal(pd.read_parquet(ref / f"synthetic/{name}.parquet"),
                                      pd.read_parquet(got / f"synthetic/{name}.parquet"))
    a, b = json.loads((ref / "ledger.json").read_text()), json.loads((got / "ledger.json").read_text())
    assert a["charges"] == b["charges"] and a["spent"] == b["spent"]  # replayed, never charged twice
    _check_ledger(got, ["users", "sessions", "bookings", "sessions.user_id", "bookings.user_id"])
    ra, rb = json.loads((ref / "report.json").read_text()), json.loads((got / "report.json").read_text())
    assert [lk["from"] for lk in rb["links"]] == ["sessions.user_id", "bookings.user_id"]
    assert ra["dp_error_measured_workloads"] == rb["dp_error_measured_workloads"]


def test_public_only_with_list_form(tmp_path: Path) -> None:
    cfg = _files(tmp_path)
    cfg["data"]["tables"].pop("bookings")
    cfg["data"]["links"] = cfg["data"]["links"][0]
    cfg["privacy"] = {"tables": {"users": "public", "sessions": {"epsilon": 1, "delta": 1e-6}},
                      "links": {"epsilon": 1, "delta": 1e-6}}
    with pytest.raises(ConfigError, match=r"privacy.tables.users: 'public'"):
        _run(cfg, tmp_path)


def test_cli_bad_graph_config_one_line_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = _bad(_files(tmp_path), lambda c: c["privacy"]["links"].pop("sessions.user_id"))
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "privcube", "run", str(tmp_path / "cfg.yaml"), "--out",
                           str(tmp_path / "out"), "--seed", "1", "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and "sessions.user_id" in proc.stderr


def test_children_that_cannot_fit_under_d_max_are_refused_before_anything_is_spent(tmp_path: Path) -> None:
    """120 sessions on 40 users cannot keep their foreign keys with ≤ 2 children a user (80): refused up front
    from the public sizes (one line, nothing written, no table synthesized), as with two tables; with
    ``degrees: free`` (no d_max promise on the output) the job runs."""
    cfg = _files(tmp_path)
    cfg["mechanism"].update({"d_max": 2, "truncate": True})
    with pytest.raises(ConfigError) as e:
        _run(cfg, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "120 synthetic rows of 'sessions'" in msg and "40 parents" in msg
    assert "raise d_max to at least 3" in msg
    assert not (tmp_path / "run").exists()
    free = copy.deepcopy(cfg)
    free["mechanism"]["degrees"] = "free"
    assert (_run(free, tmp_path, "free") / ".complete").exists()


def test_two_table_jobs_refuse_links_that_cannot_fit_under_d_max() -> None:
    """The same check inside ``run_relational`` (two tables, where it needs ``synthetic_rows``: truncation drops
    the children it unlinks there), before the first charge."""
    from privcube.relational.stages.composition import compose_budgets
    from privcube.relational.stages.run import run_relational
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.relational.example_data import movielens_like, parent_child_like

    b = {"tables": {"parents": {"epsilon": 1, "delta": 1e-6}, "children": {"epsilon": 1, "delta": 1e-6}},
         "links": {"epsilon": 1, "delta": 1e-6}}
    pc = parent_child_like(n_parents=60, n_children=240, d_max=10, seed=2)
    ledger = PrivacyLedger(compose_budgets(b, ["parents", "children"]))
    with pytest.raises(ConfigError, match=r"the 240 synthetic rows of 'children' each need a parent in 'parents', "
                                          r"but 20 parents with at most d_max 10 children hold 200"):
        run_relational(pc["tables"], pc["links"], {"d_max": 10, "synthetic_rows": {"parents": 20}}, b, ledger)
    assert ledger.spent_rho == 0.0
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    bm = {"tables": {"users": {"epsilon": 1, "delta": 1e-6}, "movies": {"epsilon": 1, "delta": 1e-6}},
          "links": {"epsilon": 1, "delta": 1e-6}}
    with pytest.raises(ConfigError, match=r"synthetic links do not fit on the 10 synthetic rows of 'movies'"):
        run_relational(ml["tables"], ml["links"], {"d_max": 10, "synthetic_rows": {"movies": 10}}, bm)
