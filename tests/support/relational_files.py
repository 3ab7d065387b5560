"""Generated relational jobs the tests share: a parent/child pair (one-to-many), users x movies through a
ratings table (many-to-many), a schema graph (users <- sessions, bookings, events) and its ledger check."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

#: a quick relational mechanism section (few iterations): these jobs test plumbing, not quality
FAST = {"name": "relational", "d_max": 10, "iterations": 2, "pgd_iters": 20, "candidates": 50}
REGIONS = ["north", "south", "east", "west"]
KINDS = ["view", "click", "buy"]
SIZE_BINS = [0, 10, 100, 1000]
EPS = {"parents": 1.0, "children": 0.5, "links": 1.0}
DELTA = {"parents": 1e-6, "children": 2e-6, "links": 1e-6}


def _o2m_files(folder: Path, seed: int = 0) -> dict:
    """Parents (string ids, categorical region, binned size) and children (FK, kind, integer device, hour)."""
    rng = np.random.default_rng(seed)
    n_p, n_c = 40, 160
    region = rng.integers(0, 4, n_p)
    size = rng.choice([3.0, 50.0, 500.0], n_p)
    pid = np.array([f"p{k:03d}" for k in range(n_p)])
    parent = np.concatenate([np.repeat(np.arange(n_p), 3), rng.integers(0, n_p, n_c - 3 * n_p)])
    rng.shuffle(parent)
    # cap degrees at 8 (< d_max 10) by reassigning overflow to the least-used parent
    for c in range(n_c):
        deg = np.bincount(parent, minlength=n_p)
        if deg[parent[c]] > 8:
            parent[c] = int(np.argmin(deg))
    device = (region[parent] + (rng.random(n_c) < 0.2)) % 4  # planted cross-table correlation
    kind = rng.integers(0, 3, n_c)
    hour = rng.integers(0, 24, n_c).astype(float)
    hour[::17] = np.nan
    pd.DataFrame({"id": pid, "region": np.array(REGIONS)[region], "size": size}).to_parquet(folder / "parents.parquet")
    pd.DataFrame({"session": np.arange(n_c) + 7, "parent_id": pid[parent], "kind": np.array(KINDS)[kind],
                  "device": device, "hour": hour}).to_parquet(folder / "children.parquet")
    (folder / "parents.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "region", "type": "categorical", "categories": REGIONS},
        {"name": "size", "type": "numeric", "bins": SIZE_BINS}]}))
    (folder / "children.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "kind", "type": "categorical", "categories": KINDS},
        {"name": "device", "type": "integer", "size": 4},
        {"name": "hour", "type": "numeric", "bins": [0, 6, 12, 18, 24], "missing": "code"}]}))
    return {
        "data": {"tables": {"parents": {"path": "parents.parquet", "schema": "parents.yaml", "key": "id"},
                            "children": {"path": "children.parquet", "schema": "children.yaml", "key": "session"}},
                 "links": {"from": "children.parent_id", "to": "parents.id"}},
        "mechanism": dict(FAST),
        "privacy": {"tables": {n: {"epsilon": EPS[n], "delta": DELTA[n]} for n in ("parents", "children")},
                    "links": {"epsilon": EPS["links"], "delta": DELTA["links"]}},
    }


def _m2m_files(folder: Path, seed: int = 1) -> dict:
    """Users × movies with a ratings link table (integer ids, extra rating column), domain-only schemas."""
    rng = np.random.default_rng(seed)
    n_u, n_m = 50, 40
    users = pd.DataFrame({"uid": np.arange(n_u) + 100, "age": rng.integers(0, 5, n_u), "sex": rng.integers(0, 2, n_u)})
    movies = pd.DataFrame({"mid": np.arange(n_m) + 900, "g0": rng.integers(0, 2, n_m), "g1": rng.integers(0, 2, n_m)})
    flat = rng.choice(n_u * n_m, size=150, replace=False)
    ui, mj = np.divmod(flat, n_m)
    ratings = pd.DataFrame({"user_id": users["uid"].to_numpy()[ui], "movie_id": movies["mid"].to_numpy()[mj],
                            "rating": rng.integers(1, 6, ui.size)})
    users.to_parquet(folder / "users.parquet")
    movies.to_parquet(folder / "movies.parquet")
    ratings.to_csv(folder / "ratings.csv", index=False)
    (folder / "users.json").write_text(json.dumps({"age": 5, "sex": 2}))
    return {
        "data": {"tables": {"users": {"path": "users.parquet", "domain": "users.json", "key": "uid"},
                            "movies": {"path": "movies.parquet", "domain": {"g0": 2, "g1": 2}}},
                 "links": {"path": "ratings.csv", "left": "users.uid", "right": "movies.mid",
                           "columns": ["user_id", "movie_id"]}},
        "mechanism": {**FAST, "d_max": 15},
        "privacy": {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "movies": {"epsilon": 1.0, "delta": 1e-6}},
                    "links": {"rho": 0.05, "delta": 1e-6}},
    }


BUD = {"users": (1.0, 1e-6), "sessions": (0.5, 2e-6), "bookings": (0.7, 1e-6), "events": (0.4, 1e-6)}
LINK_BUD = {"sessions.user_id": (1.0, 1e-6), "bookings.user_id": (0.8, 3e-6), "events.session_id": (0.6, 1e-6)}


def _children(rng: np.random.Generator, n_parents: int, n: int, cap: int = 8) -> np.ndarray:
    """Parent positions of n children, each parent at most ``cap`` children."""
    parent = rng.integers(0, n_parents, n)
    for c in range(n):
        deg = np.bincount(parent, minlength=n_parents)
        if deg[parent[c]] > cap:
            parent[c] = int(np.argmin(deg))
    return parent


def _files(folder: Path, chain: bool = False, seed: int = 0) -> dict:
    """users (text ids), sessions and bookings (FK user_id), optionally events (FK session_id)."""
    rng = np.random.default_rng(seed)
    n_u, n_s, n_b, n_e = 40, 120, 60, 150
    uid = np.array([f"u{k:03d}" for k in range(n_u)])
    age = rng.integers(0, 4, n_u)
    pd.DataFrame({"id": uid, "age": age, "region": rng.integers(0, 3, n_u)}).to_parquet(folder / "users.parquet")
    su = _children(rng, n_u, n_s)
    pd.DataFrame({"sid": np.arange(n_s) + 1000, "user_id": uid[su], "device": (age[su] + (rng.random(n_s) < .2)) % 4,
                  "hour": rng.integers(0, 3, n_s)}).to_parquet(folder / "sessions.parquet")
    bu = _children(rng, n_u, n_b)
    pd.DataFrame({"bid": np.arange(n_b), "user_id": uid[bu], "kind": rng.integers(0, 2, n_b)}).to_parquet(
        folder / "bookings.parquet")
    tables = {"users": {"path": "users.parquet", "domain": {"age": 4, "region": 3}, "key": "id"},
              "sessions": {"path": "sessions.parquet", "domain": {"device": 4, "hour": 3}, "key": "sid"},
              "bookings": {"path": "bookings.parquet", "domain": {"kind": 2}}}
    links = [{"from": "sessions.user_id", "to": "users.id"}, {"from": "bookings.user_id", "to": "users.id"}]
    if chain:
        es = _children(rng, n_s, n_e)
        pd.DataFrame({"session_id": es + 1000, "action": rng.integers(0, 3, n_e)}).to_parquet(folder / "events.parquet")
        tables["events"] = {"path": "events.parquet", "domain": {"action": 3}}
        links.append({"from": "events.session_id", "to": "sessions.sid"})
    names = [lk["from"] for lk in links]
    return {"data": {"tables": tables, "links": links}, "mechanism": dict(FAST),
            "privacy": {"tables": {n: {"epsilon": BUD[n][0], "delta": BUD[n][1]} for n in tables},
                        "links": {n: {"epsilon": LINK_BUD[n][0], "delta": LINK_BUD[n][1]} for n in names}}}


def _check_ledger(out: Path, parts: list[str]) -> dict:
    """Budget = Σ of the parts; spent ≤ budget and = Σ of the parts' spent; charges labelled per part."""
    led = json.loads((out / "ledger.json").read_text())
    bud = {**BUD, **LINK_BUD}
    assert math.isclose(led["budget"]["epsilon"], sum(bud[p][0] for p in parts), rel_tol=1e-12)
    assert math.isclose(led["budget"]["delta"], sum(bud[p][1] for p in parts), rel_tol=1e-12)
    comp = led["composition"]["parts"]
    assert sorted(comp) == sorted(parts)
    rho_by_part = {p: 0.0 for p in parts}
    for c in led["charges"]:
        head, part = c["label"].split(":")[:2]
        assert head in ("table", "link")
        rho_by_part[part] += c["rho"]
    for p in parts:
        assert math.isclose(comp[p]["spent"]["rho"], rho_by_part[p], rel_tol=1e-12)
        assert comp[p]["spent"]["rho"] <= comp[p]["budget"]["rho"]  # exactly: no rounding above the budget
        assert comp[p]["spent"]["rho"] > 0
    assert math.isclose(led["spent"]["rho"], sum(rho_by_part.values()), rel_tol=1e-12)
    assert led["spent"]["rho"] <= led["budget"]["rho"] * (1 + 1e-9)
    assert math.isclose(led["spent"]["epsilon"], sum(comp[p]["spent"]["epsilon"] for p in parts), rel_tol=1e-12)
    assert led["spent"]["epsilon"] <= led["budget"]["epsilon"] * (1 + 1e-9)
    assert led["spent"]["delta"] <= led["budget"]["delta"] * (1 + 1e-12)
    return led


# ------------------------------------------------------------------------------------------ relational

def _relational(folder: Path) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    parents = pd.DataFrame({"id": [f"KEYSECRET{k}" for k in range(12)], "region": ["north", "south"] * 6})
    children = pd.DataFrame({"cid": np.arange(40) + 77123, "pid": [f"KEYSECRET{k % 12}" for k in range(40)],
                             "kind": ["a", "b"] * 20})
    (folder / "parents.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "region", "type": "categorical", "categories": ["north", "south"]}]}))
    (folder / "children.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "kind", "type": "categorical", "categories": ["a", "b"]}]}))
    cfg = {"data": {"tables": {"parents": {"path": "parents.parquet", "schema": "parents.yaml", "key": "id"},
                               "children": {"path": "children.parquet", "schema": "children.yaml", "key": "cid"}},
                    "links": {"from": "children.pid", "to": "parents.id"}},
           "mechanism": {"name": "relational", "d_max": 10, "iterations": 1, "pgd_iters": 5, "candidates": 10},
           "privacy": {"tables": {"parents": {"epsilon": 1.0, "delta": 1e-6},
                                  "children": {"epsilon": 1.0, "delta": 1e-6}},
                       "links": {"epsilon": 1.0, "delta": 1e-6}},
           "cluster": {"type": "threads"}}
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "job.yaml", parents, children


def _identity(ds: dict) -> dict:
    """A generated data set's tables as they are (the identity synthesizer)."""
    return {n: v[0] for n, v in ds["tables"].items()}
