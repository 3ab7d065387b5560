"""A schema graph with a many-to-many link table in the list form of data.links: users <- sessions (a
foreign key) and users <-> movies (a link table, the keys of the two-table form), end to end and planned."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube import api
from privcube.core.errors import BudgetError, ConfigError

from relational_files import _check_ledger, _children  # noqa: E402

FAST = {"name": "relational", "d_max": 10, "k": 2, "iterations": 2, "pgd_iters": 20, "candidates": 50}
M2M = "users.id-movies.mid"
BUD = {"users": (1.0, 1e-6), "sessions": (0.5, 2e-6), "movies": (0.7, 1e-6),
       "sessions.user_id": (1.0, 1e-6), M2M: (0.8, 3e-6)}


def _files(folder: Path, seed: int = 0) -> dict:
    """users (text ids), sessions (FK user_id), movies (int ids) and ratings (user_id, movie_id pairs, distinct,
    at most 6 per user and per movie)."""
    rng = np.random.default_rng(seed)
    n_u, n_s, n_m = 40, 120, 30
    uid = np.array([f"u{k:03d}" for k in range(n_u)])
    age = rng.integers(0, 3, n_u)
    pd.DataFrame({"id": uid, "age": age, "region": rng.integers(0, 2, n_u)}).to_parquet(folder / "users.parquet")
    su = _children(rng, n_u, n_s)
    pd.DataFrame({"user_id": uid[su], "device": (age[su] + (rng.random(n_s) < .2)) % 3}).to_parquet(
        folder / "sessions.parquet")
    genre = rng.integers(0, 3, n_m)
    pd.DataFrame({"mid": np.arange(n_m) + 500, "genre": genre}).to_parquet(folder / "movies.parquet")
    pairs = set()
    for u in range(n_u):  # users like movies of the genre matching their age (a planted cross correlation)
        liked = np.flatnonzero(genre == age[u])
        for m in rng.choice(liked if len(liked) else np.arange(n_m), size=3, replace=len(liked) < 3):
            pairs.add((u, int(m)))
    pairs = sorted(pairs)
    per_movie = np.bincount([m for _, m in pairs], minlength=n_m)
    assert per_movie.max() <= 10
    pd.DataFrame({"user_id": uid[[u for u, _ in pairs]], "movie_id": np.array([m for _, m in pairs]) + 500}).to_parquet(
        folder / "ratings.parquet")
    tables = {"users": {"path": "users.parquet", "domain": {"age": 3, "region": 2}, "key": "id"},
              "sessions": {"path": "sessions.parquet", "domain": {"device": 3}},
              "movies": {"path": "movies.parquet", "domain": {"genre": 3}}}
    links = [{"from": "sessions.user_id", "to": "users.id"},
             {"path": "ratings.parquet", "left": "users.id", "right": "movies.mid", "columns": ["user_id", "movie_id"]}]
    return {"data": {"tables": tables, "links": links}, "mechanism": dict(FAST),
            "privacy": {"tables": {n: {"epsilon": BUD[n][0], "delta": BUD[n][1]} for n in tables},
                        "links": {n: {"epsilon": BUD[n][0], "delta": BUD[n][1]} for n in ("sessions.user_id", M2M)}}}


def _run(cfg: dict, folder: Path, name: str = "run", seed: int = 5) -> Path:
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    out = folder / name
    privcube.run(folder / "cfg.yaml", out, seed=seed, quiet=True)
    return out


def test_fk_and_link_table_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import relational_files

    monkeypatch.setattr(relational_files, "BUD", {k: v for k, v in BUD.items() if "." not in k})
    monkeypatch.setattr(relational_files, "LINK_BUD", {k: v for k, v in BUD.items() if "." in k})
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(_files(tmp_path)))
    res = privcube.run(tmp_path / "cfg.yaml", tmp_path / "run", seed=5, quiet=True)
    out = tmp_path / "run"
    # the Python result reads the link files too
    pd.testing.assert_frame_equal(res.synthetic(f"links/{M2M}"), pd.read_parquet(out / f"synthetic/links/{M2M}.parquet"))
    names = sorted(p.relative_to(out).as_posix() for p in (out / "synthetic").rglob("*.parquet"))
    assert names == ["synthetic/links/sessions.user_id.parquet", f"synthetic/links/{M2M}.parquet",
                     "synthetic/movies.parquet", "synthetic/sessions.parquet", "synthetic/users.parquet"]
    users = pd.read_parquet(out / "synthetic/users.parquet")
    movies = pd.read_parquet(out / "synthetic/movies.parquet")
    sess = pd.read_parquet(out / "synthetic/sessions.parquet")
    ratings = pd.read_parquet(out / f"synthetic/links/{M2M}.parquet")
    assert (len(users), len(movies), len(sess)) == (40, 30, 120)
    assert list(movies.columns) == ["mid", "genre"] and list(sess.columns) == ["id", "device", "user_id"]
    # referential integrity: FK -> users, both ends of every rating a key of its synthetic table
    assert sess["user_id"].isin(set(users["id"])).all()
    assert list(ratings.columns) == ["users.id", "movies.mid"]
    assert len(ratings) == 120 and not ratings.duplicated().any()  # m_syn = m: the real link count (public)
    assert ratings["users.id"].isin(set(users["id"])).all() and ratings["movies.mid"].isin(set(movies["mid"])).all()
    assert ratings.groupby("movies.mid").size().max() <= FAST["d_max"]  # d_max respected on the right side
    fk_file = pd.read_parquet(out / "synthetic/links/sessions.user_id.parquet")
    assert (fk_file.set_index("sessions.id")["users.id"].sort_index() == sess.set_index("id")["user_id"].sort_index()).all()
    # the ledger adds up: five parts, each link under its own name
    led = _check_ledger(out, ["users", "sessions", "movies", "sessions.user_id", M2M])
    assert any(c["label"].startswith(f"link:{M2M}:") for c in led["charges"])
    rep = json.loads((out / "report.json").read_text())
    (fk, m2m) = rep["links"]
    assert fk["from"] == "sessions.user_id" and fk["kind"] == "one_to_many"
    assert m2m["kind"] == "many_to_many" and (m2m["left"], m2m["right"]) == ("users.id", "movies.mid")
    assert m2m["file"] == f"synthetic/links/{M2M}.parquet" and m2m["spent"]["rho"] > 0
    assert math.isclose(m2m["budget"]["epsilon"], BUD[M2M][0], rel_tol=1e-12)
    assert set(rep["dp_error_measured_workloads"]) == {"sessions.user_id", M2M}
    assert rep["sizes"]["links_synthetic"] == {"sessions.user_id": 120, M2M: 120}
    # the report page shows every part and each link's DP error and iterations
    from privcube.report import render_report

    html = render_report(out)
    split = html[html.index('<section id="privacy-split">'):]
    split = split[:split.index("</section>")]
    assert all(f"<td>{p}</td>" in split for p in ("users", "sessions", "movies", "sessions.user_id", M2M))
    for anchor in ("dp-error", "iterations"):
        sec = html[html.index(f'<section id="{anchor}">'):]
        sec = sec[:sec.index("</section>")]
        assert "<h3>sessions.user_id</h3>" in sec and f"<h3>{M2M}</h3>" in sec
    conf = yaml.safe_load((out / "config.yaml").read_text())
    assert conf["resolved"]["links"][1]["kind"] == "many_to_many" and Path(conf["data"]["links"][1]["path"]).is_absolute()


def test_plan_previews_the_link_table(tmp_path: Path) -> None:
    cfg = _files(tmp_path)
    for f in ("users", "sessions", "movies", "ratings"):
        (tmp_path / f"{f}.parquet").unlink()  # a plan reads no data
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    plan = api.plan(tmp_path / "cfg.yaml", links=100)
    assert set(plan.privacy["parts"]) == {"users", "sessions", "movies", "sessions.user_id", M2M}
    assert math.isclose(plan.privacy["epsilon"], sum(b[0] for b in BUD.values()), rel_tol=1e-12)
    fk, m2m = plan.details["links"]
    assert fk["kind"] == "one_to_many" and m2m["kind"] == "many_to_many"
    assert m2m["link"] == "users.id <-> movies.mid" and m2m["rho"] == plan.privacy["parts"][M2M]["rho"]
    assert m2m["measurements"] >= 1 and m2m["count_noise_std"] > 0 and m2m["links"] == 100
    for lp in (fk, m2m):  # never more ρ per measurement than the link's budget; an uninformative link says so
        assert 0 < lp["rho_per_measurement"] <= lp["rho"]
        assert lp["informative"] or ("max_noise" in lp["warning"] and lp["measurements"] == 1)
    cfg["mechanism"]["uninformative"] = "random"
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    for lp in api.plan(tmp_path / "cfg.yaml", links=100).details["links"]:
        assert lp["informative"] or (lp["measurements"] == 0 and "random links" in lp["warning"])


@pytest.mark.parametrize("edit, exc, match", [
    (lambda c: c["privacy"]["links"].pop(M2M), BudgetError, f"no budget for link '{M2M}'"),
    (lambda c: c["privacy"]["links"].update({"users.id-movies.id": c["privacy"]["links"].pop(M2M)}), ConfigError,
     r"unknown link\(s\) \['users.id-movies.id'\]"),
    (lambda c: c["data"]["links"][1].update({"weight": 1}), ConfigError, r"unknown key\(s\) \['weight'\] for a link table"),
    (lambda c: (c["data"]["tables"]["movies"].update({"key": "mid"}), c["data"]["links"][1].update(
        {"right": "movies.id"})), ConfigError, r"data.links\[1\].right names movies.id but data.tables.movies.key is 'mid'"),
    (lambda c: c["data"]["links"][1].update({"left": "users.uid"}), ConfigError,
     r"data.links\[1\].left names users.uid but data.tables.users.key is 'id'"),
    (lambda c: c["data"]["links"][1].update({"right": "users.id"}), ConfigError, "self-referential link table"),
    (lambda c: c["data"]["links"].append(dict(c["data"]["links"][1])), ConfigError, "one link table per pair"),
    (lambda c: c["data"]["links"][1].update({"left": "shows.id"}), ConfigError, "unknown table 'shows'"),
])
def test_bad_link_table_items_are_refused_before_data(tmp_path: Path, edit, exc, match) -> None:
    cfg = _files(tmp_path)
    edit(cfg)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(exc, match=match):
        privcube.run(tmp_path / "cfg.yaml", tmp_path / "out", seed=1, quiet=True)
    assert not (tmp_path / "out").exists()


def test_killed_run_resumes_after_the_link_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the link table's commit (tables 0-2, link table 3): the resumed run keeps its pairs (restored
    from the checkpoint) and equals the uninterrupted run; nothing is charged twice."""
    from checkpoint_kill import Crash, after_commit, crash_after

    cfg = _files(tmp_path)
    cfg["data"]["links"].reverse()  # the link table first, so the crash falls between the two links
    ref = _run(cfg, tmp_path, "ref")
    after_commit(monkeypatch, crash_after(3))
    with pytest.raises(Crash):
        _run(cfg, tmp_path, "got")
    monkeypatch.undo()
    privcube.run(tmp_path / "cfg.yaml", tmp_path / "got", seed=5, resume=True, quiet=True)
    got = tmp_path / "got"
    for name in ("users", "movies", "sessions", f"links/{M2M}", "links/sessions.user_id"):
        pd.testing.assert_frame_equal(pd.read_parquet(ref / f"synthetic/{name}.parquet"),
                                      pd.read_parquet(got / f"synthetic/{name}.parquet"))
    a, b = json.loads((ref / "ledger.json").read_text()), json.loads((got / "ledger.json").read_text())
    assert a["charges"] == b["charges"] and a["spent"] == b["spent"]
