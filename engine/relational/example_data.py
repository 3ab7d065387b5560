"""Relational test data: seeded MovieLens-like (many-to-many), parent/child (one-to-many) and people → parents
(self-referential) generators with planted cross-table correlations, plus a reader for two tables and their links from files.

Every generator returns ``{"tables": {name: (DataFrame with key + code columns, Domain)}, "links": spec}``,
the shape ``privcube.relational.stages.run.run_relational`` takes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DataError


def movielens_like(n_users: int = 300, n_movies: int = 200, n_genres: int = 6, *, d_max: int = 10,
                   mean_degree: float = 5.0, beta: float = 2.5, seed: int = 0) -> dict[str, Any]:
    """Users (gender 2, age 7, occupation 21) × movies (binary genres), ratings with degree ≤ d_max.

    Planted dependency: age group a has genre affinities A[a, g]; user u rates movie v with weight
    ∝ exp(β·Σ_g A[age_u, g]·genre_v[g]) among movies that still have capacity.
    """
    rng = np.random.default_rng(seed)
    gender = rng.integers(0, 2, n_users)
    age = rng.choice(7, n_users, p=[0.05, 0.2, 0.3, 0.2, 0.1, 0.08, 0.07])
    occ = np.minimum((age * 3 + rng.integers(0, 6, n_users)) % 21, 20)  # occupation correlates with age
    genres = (rng.random((n_movies, n_genres)) < 0.3).astype(np.int64)
    genres[genres.sum(1) == 0, rng.integers(0, n_genres)] = 1
    A = rng.normal(0, 1, (7, n_genres))
    A[:, 0] += np.linspace(-1.5, 1.5, 7)  # a strong age trend on genre 0
    affinity = A[age] @ genres.T  # n_users × n_movies
    cap = np.full(n_movies, d_max)
    ui, mj = [], []
    for u in rng.permutation(n_users):
        deg = int(min(d_max, max(1, rng.poisson(mean_degree))))
        ok = np.flatnonzero(cap > 0)
        if ok.size == 0:
            break
        w = np.exp(beta * (affinity[u, ok] - affinity[u, ok].max()))
        pick = rng.choice(ok, size=min(deg, ok.size), replace=False, p=w / w.sum())
        cap[pick] -= 1
        ui.extend([u] * pick.size)
        mj.extend(pick.tolist())
    udom = Domain(("gender", "age", "occupation"), (2, 7, 21))
    mdom = Domain(tuple(f"genre{g}" for g in range(n_genres)), (2,) * n_genres)
    users = pd.DataFrame({"id": np.arange(n_users) + 1000, "gender": gender, "age": age, "occupation": occ})
    movies = pd.DataFrame({"id": np.arange(n_movies) + 5000, **{f"genre{g}": genres[:, g] for g in range(n_genres)}})
    ratings = pd.DataFrame({"user_id": users["id"].to_numpy()[ui], "movie_id": movies["id"].to_numpy()[mj]})
    return {"tables": {"users": (users, udom), "movies": (movies, mdom)},
            "links": {"pairs": ratings, "left": "users.id", "right": "movies.id", "columns": ["user_id", "movie_id"]}}


def parent_child_like(n_parents: int = 150, n_children: int = 600, *, d_max: int = 10, beta: float = 3.0,
                      seed: int = 0) -> dict[str, Any]:
    """Parents (region 4, size 3) and children (kind 3, device 4, hour 4); each child has one parent.

    Planted dependency: a child's device matches its parent's region (mod 4) with high probability,
    and kind depends on parent size; parents take at most d_max children.
    """
    rng = np.random.default_rng(seed)
    region = rng.integers(0, 4, n_parents)
    size = rng.choice(3, n_parents, p=[0.5, 0.3, 0.2])
    kind = rng.integers(0, 3, n_children)
    device = rng.integers(0, 4, n_children)
    hour = (device + rng.integers(0, 2, n_children)) % 4
    cap = np.full(n_parents, d_max)
    parent = np.empty(n_children, dtype=np.int64)
    for c in range(n_children):
        ok = np.flatnonzero(cap > 0)
        if ok.size == 0:
            raise DataError(f"parent_child_like: {n_children} children exceed capacity {n_parents}×d_max={d_max}")
        score = beta * ((region[ok] == device[c]).astype(float) + (size[ok] == kind[c]))
        w = np.exp(score - score.max())
        parent[c] = rng.choice(ok, p=w / w.sum())
        cap[parent[c]] -= 1
    pdom = Domain(("region", "size"), (4, 3))
    cdom = Domain(("kind", "device", "hour"), (3, 4, 4))
    parents = pd.DataFrame({"id": np.arange(n_parents) + 1, "region": region, "size": size})
    children = pd.DataFrame({"id": np.arange(n_children), "parent_id": parents["id"].to_numpy()[parent],
                             "kind": kind, "device": device, "hour": hour})
    return {"tables": {"children": (children, cdom), "parents": (parents, pdom)},
            "links": {"from": "children.parent_id", "to": "parents.id"}}


def self_referential_like(n_households: int = 80, *, d_max: int = 4, seed: int = 0) -> dict[str, Any]:
    """One ``people`` table (race 4, age group 6, sex 2, education 4) linked to itself: child → parent.

    IPUMS-shaped (the paper's self-referential experiment): households of 2–6 people, the first one or
    two are parents (same race, adult ages), the others children who link to 1–2 of the household's
    parents; children share their parents' race and are younger. Links are directed (source = child,
    target = parent), there are no self-loops, every in/out-degree is ≤ min(d_max, 4).
    """
    rng = np.random.default_rng(seed)
    race, age, sex, edu, src, dst = [], [], [], [], [], []
    pid = 0
    for _ in range(n_households):
        size = int(rng.integers(2, 7))
        n_par = 1 if size <= 3 else 2  # at most 4 children per parent
        r = int(rng.choice(4, p=[0.55, 0.25, 0.12, 0.08]))
        parents = []
        for q in range(size):
            is_parent = q < n_par
            race.append(r if rng.random() < 0.95 else int(rng.integers(0, 4)))
            age.append(int(rng.integers(3, 6)) if is_parent else int(rng.integers(0, 3)))
            sex.append(q % 2 if is_parent else int(rng.integers(0, 2)))
            edu.append(int(rng.integers(1, 4)) if is_parent else int(min(3, rng.integers(0, 2))))
            if is_parent:
                parents.append(pid)
            else:
                k = min(len(parents), int(rng.integers(1, 3)), d_max)
                for par in rng.choice(parents, size=k, replace=False):
                    src.append(pid)
                    dst.append(int(par))
            pid += 1
    dom = Domain(("race", "age", "sex", "education"), (4, 6, 2, 4))
    people = pd.DataFrame({"id": np.arange(pid) + 10, "race": race, "age": age, "sex": sex, "education": edu})
    ids = people["id"].to_numpy()
    pairs = pd.DataFrame({"child_id": ids[np.asarray(src, dtype=np.int64)], "parent_id": ids[np.asarray(dst, dtype=np.int64)]})
    return {"tables": {"people": (people, dom)},
            "links": {"pairs": pairs, "left": "people.id", "right": "people.id", "columns": ["child_id", "parent_id"]}}


def users_sessions_like(n_users: int = 10_000, *, d_max: int = 20, seed: int = 0) -> dict[str, Any]:
    """``users`` (age 5, region 4) ← ``sessions`` (device 3, hour 4), one-to-many: 40 % of users have no
    session, the others a geometric number (≤ d_max) whose mean grows with age; a session's device follows
    its user's age. The children-per-parent distribution is skewed, as real session counts are, and the
    tables' few codes repeat (large groups of interchangeable records). Also returns the real degrees."""
    rng = np.random.default_rng(seed)
    age, reg = rng.integers(0, 5, n_users), rng.integers(0, 4, n_users)
    deg = np.where(rng.random(n_users) < 0.4, 0, np.minimum(rng.geometric(0.25 + 0.1 * (age >= 3), n_users), d_max))
    par = np.repeat(np.arange(n_users), deg)
    dev = (age[par] + (rng.random(par.size) < 0.3)) % 3
    users = pd.DataFrame({"id": np.arange(n_users), "age": age, "region": reg})
    sessions = pd.DataFrame({"sid": np.arange(par.size), "uid": par, "device": dev,
                             "hour": rng.integers(0, 4, par.size)})
    return {"tables": {"users": (users, Domain(("age", "region"), (5, 4))),
                       "sessions": (sessions, Domain(("device", "hour"), (3, 4)))},
            "links": {"from": "sessions.uid", "to": "users.id"}, "degrees": deg}


def read_table(path: str | Path) -> pd.DataFrame:
    """A table from CSV or Parquet (by suffix)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"table file {str(p)!r} does not exist")
    if p.suffix in (".parquet", ".pq"):
        return pd.read_parquet(p)
    return pd.read_csv(p)


def encode_columns(frame: pd.DataFrame, spec: dict[str, Any], table: str) -> tuple[pd.DataFrame, Domain]:
    """Encode columns by an explicit public spec: ``{col: {"bins": [edges]}}`` or ``{col: {"values": [...]}}``.

    Binned columns map missing values and values outside the edges to an extra last code; categorical
    columns map unknown or missing values to an extra ``other`` code. Non-spec columns pass through.
    """
    out = frame.copy()
    sizes: dict[str, int] = {}
    for col, how in spec.items():
        if col not in frame.columns:
            raise DataError(f"table {table!r} has no column {col!r}")
        if "bins" in how:
            edges = np.asarray(how["bins"], dtype=float)
            vals = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
            code = np.searchsorted(edges, vals, side="right") - 1
            bad = np.isnan(vals) | (code < 0) | (code >= len(edges) - 1)
            code[bad] = len(edges) - 1
            out[col] = code.astype(np.int64)
            sizes[col] = len(edges)
        elif "values" in how:
            cats = list(how["values"])
            lut = {v: k for k, v in enumerate(cats)}
            out[col] = frame[col].map(lambda v: lut.get(v, len(cats))).astype(np.int64)
            sizes[col] = len(cats) + 1
        else:
            raise DataError(f"table {table!r}: column {col!r} needs 'bins' or 'values' in its encoding spec")
    return out, Domain.from_mapping(sizes)


__all__ = ["movielens_like", "parent_child_like", "self_referential_like", "users_sessions_like", "read_table",
           "encode_columns"]
