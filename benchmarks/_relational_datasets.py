"""The relational quality benchmark's three data sets, written as `privcube run` jobs (issue 36, item 5).

- ``airbnb``: the project's Airbnb users <- sessions with the shipped schemas (benchmarks/configs/airbnb), d_max 50.
- ``airbnb-b``: the same data encoded otherwise, as a new user would: other bins and groupings
  (benchmarks/configs/airbnb_b: account dates in bins that cut 2014 in three, ages by decade, destinations,
  devices and languages grouped, seconds in other bins), and a third table derived from it, devices
  (one row per user and device group of their sessions, 7 groups, at most 3 a user) with its own bound
  (``privacy.links.devices.user_id.d_max: 3``) and ``within: sessions.user_id`` (a user's devices are among
  their sessions'). The derived CSV files are written to the job's folder; ../shared stays as it is.
- ``generated``: users <- orders, users <- tickets with known cross-table structure (seeded): the plan decides
  who orders and how much, age the order category, region the channel; only customers with orders open
  tickets (tenure decides who), plan the ticket topic, age its priority; orders d_max 20, tickets d_max 4,
  ``within: orders.user_id``.

``write_job(name, folder, eps_rel, ...)`` writes the data (where derived or generated) and a job config, and
returns the config path and what the evaluation needs (each link's d_max, the real parent sets).
NON-private throughout: this is benchmark data, not a release.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
AIRBNB = ROOT.parent / "shared" / "data" / "airbnb"
CONFIGS = ROOT / "benchmarks" / "configs"
DATASETS = ("airbnb", "airbnb-b", "generated")

DEVICE_GROUP = {"Mac Desktop": "mac", "Windows Desktop": "windows", "iPhone": "iphone", "iPad Tablet": "tablet",
                "Tablet": "tablet", "Android App Unknown Phone/Tablet": "android", "Android Phone": "android",
                "-unknown-": "unknown", "Linux Desktop": "other", "Chromebook": "other", "Windows Phone": "other",
                "Blackberry": "other"}
FIRST_DEVICE = {"Mac Desktop": "desktop", "Windows Desktop": "desktop", "Desktop (Other)": "desktop",
                "iPhone": "phone", "Android Phone": "phone", "SmartPhone (Other)": "phone", "iPad": "tablet",
                "Android Tablet": "tablet", "Other/Unknown": "other"}
EUROPE = {"FR", "IT", "GB", "ES", "DE", "NL", "PT"}


def _budget(eps: float) -> dict[str, float]:
    return {"epsilon": float(eps), "delta": 1e-6}


def _airbnb(folder: Path, eps_rel: float, eps_table: float, params: dict) -> dict:
    raw = yaml.safe_load((CONFIGS / "airbnb" / "relational.yaml").read_text())
    for t in ("users", "sessions"):
        spec = raw["data"]["tables"][t]
        spec["path"] = str((CONFIGS / "airbnb" / spec["path"]).resolve())
        spec["schema"] = str((CONFIGS / "airbnb" / spec["schema"]).resolve())
    raw["mechanism"].update(params)
    raw["privacy"] = {"tables": {t: _budget(eps_table) for t in ("users", "sessions")}, "links": _budget(eps_rel)}
    return raw


def airbnb_b_files(folder: Path) -> None:
    """users, sessions and devices of the second encoding (derived columns; schemas in configs/airbnb_b)."""
    users = pd.read_csv(AIRBNB / "users.csv", dtype=str, keep_default_na=False, na_values=[""])
    sess = pd.read_csv(AIRBNB / "sessions.csv", dtype=str, keep_default_na=False, na_values=[""])
    users["language_group"] = np.where(users["language"] == "en", "en", "other")
    users["device_class"] = users["first_device_type"].map(FIRST_DEVICE)
    dest = users["country_destination"]
    users["destination"] = np.where(dest.isin(["NDF", "US"]), dest, np.where(dest.isin(list(EUROPE)), "europe",
                                                                             "elsewhere"))
    keep = ["id", "date_account_created", "date_first_booking", "gender", "age", "signup_method", "language_group",
            "device_class", "affiliate_channel", "destination"]
    users[keep].to_csv(folder / "users.csv", index=False)
    sess["device_group"] = sess["device_type"].map(DEVICE_GROUP)
    sess[["user_id", "action_type", "device_group", "secs_elapsed"]].to_csv(folder / "sessions.csv", index=False)
    dev = sess.groupby(["user_id", "device_group"]).size().rename("sessions_on_device").reset_index()
    dev.to_csv(folder / "devices.csv", index=False)


def _airbnb_b(folder: Path, eps_rel: float, eps_table: float, params: dict, within: bool = True) -> dict:
    if not (folder / "devices.csv").exists():
        airbnb_b_files(folder)
    cfg = CONFIGS / "airbnb_b"
    devices = {"from": "devices.user_id", "to": "users.id", **({"within": "sessions.user_id"} if within else {})}
    return {"data": {"tables": {"users": {"path": str(folder / "users.csv"), "schema": str(cfg / "users.schema.yaml"),
                                          "key": "id"},
                                "sessions": {"path": str(folder / "sessions.csv"),
                                             "schema": str(cfg / "sessions.schema.yaml")},
                                "devices": {"path": str(folder / "devices.csv"),
                                            "schema": str(cfg / "devices.schema.yaml")}},
                     "links": [{"from": "sessions.user_id", "to": "users.id"}, devices]},
            "mechanism": {"name": "relational", "d_max": 50, "truncate": True, "k": 3, **params},
            "privacy": {"tables": {t: _budget(eps_table) for t in ("users", "sessions", "devices")},
                        "links": {"sessions.user_id": _budget(eps_rel),
                                  "devices.user_id": {**_budget(eps_rel), "d_max": 3}}}}


def generated_files(folder: Path, n_users: int = 8000, seed: int = 0) -> None:
    """users <- orders, users <- tickets with planted cross-table structure (see the module docstring)."""
    rng = np.random.default_rng(seed)
    age = rng.choice(5, n_users, p=[0.15, 0.25, 0.25, 0.2, 0.15])
    region = rng.integers(0, 4, n_users)
    plan_p = np.array([[0.7, 0.25, 0.05], [0.5, 0.35, 0.15], [0.35, 0.4, 0.25], [0.25, 0.4, 0.35],
                       [0.2, 0.35, 0.45]])
    plan = np.array([rng.choice(3, p=plan_p[a]) for a in age])
    tenure = rng.integers(0, 4, n_users)
    uid = np.array([f"c{k:05d}" for k in range(n_users)])
    pd.DataFrame({"id": uid, "age": age, "region": region, "plan": plan, "tenure": tenure}).to_csv(
        folder / "users.csv", index=False)
    has_orders = rng.random(n_users) < np.array([0.2, 0.5, 0.8])[plan]
    n_orders = np.where(has_orders, np.minimum(1 + rng.poisson(np.array([1.0, 3.0, 6.0])[plan]), 20), 0)
    ou = np.repeat(np.arange(n_users), n_orders)
    cat_p = np.full((5, 6), 0.4 / 5)
    cat_p[np.arange(5), np.arange(5)] += 0.6  # category follows age
    cat_p /= cat_p.sum(axis=1, keepdims=True)
    category = np.array([rng.choice(6, p=cat_p[age[u]]) for u in ou])
    amount = np.clip(plan[ou] + 1 + rng.integers(-1, 2, ou.size), 0, 4)  # amount follows plan
    channel = np.where(rng.random(ou.size) < 0.7, region[ou] % 3, rng.integers(0, 3, ou.size))  # channel: region
    pd.DataFrame({"user_id": uid[ou], "category": category, "amount": amount, "channel": channel}).to_csv(
        folder / "orders.csv", index=False)
    has_tickets = has_orders & (rng.random(n_users) < np.array([0.15, 0.3, 0.45, 0.6])[tenure])
    n_tickets = np.where(has_tickets, 1 + rng.binomial(3, 0.25, n_users), 0)
    tu = np.repeat(np.arange(n_users), n_tickets)
    topic = np.where(rng.random(tu.size) < 0.6, plan[tu] + 2 * (plan[tu] > 0), rng.integers(0, 5, tu.size))
    priority = np.minimum(age[tu] // 2 + (rng.random(tu.size) < 0.3), 2)  # priority follows age
    pd.DataFrame({"user_id": uid[tu], "topic": np.clip(topic, 0, 4), "priority": priority}).to_csv(
        folder / "tickets.csv", index=False)


def _generated(folder: Path, eps_rel: float, eps_table: float, params: dict, within: bool = True) -> dict:
    if not (folder / "tickets.csv").exists():
        generated_files(folder)
    tickets = {"from": "tickets.user_id", "to": "users.id", **({"within": "orders.user_id"} if within else {})}
    return {"data": {"tables": {"users": {"path": str(folder / "users.csv"), "key": "id",
                                          "domain": {"age": 5, "region": 4, "plan": 3, "tenure": 4}},
                                "orders": {"path": str(folder / "orders.csv"),
                                           "domain": {"category": 6, "amount": 5, "channel": 3}},
                                "tickets": {"path": str(folder / "tickets.csv"), "domain": {"topic": 5, "priority": 3}}},
                     "links": [{"from": "orders.user_id", "to": "users.id"}, tickets]},
            "mechanism": {"name": "relational", "d_max": 20, "k": 3, **params},
            "privacy": {"tables": {t: _budget(eps_table) for t in ("users", "orders", "tickets")},
                        "links": {"orders.user_id": _budget(eps_rel), "tickets.user_id": {**_budget(eps_rel), "d_max": 4}}}}


def write_job(name: str, folder: Path, eps_rel: float, eps_table: float = 1.0, params: dict | None = None,
              within: bool = True) -> Path:
    """Data (derived or generated, once per folder) and a job config for data set ``name`` at ``eps_rel``;
    returns the config's path. ``within: False`` drops the declared sibling dependency (the count of parents
    with children in both is then released)."""
    folder.mkdir(parents=True, exist_ok=True)
    params = {"evaluate_nonprivate": True, **(params or {})}
    if name == "airbnb":
        raw = _airbnb(folder, eps_rel, eps_table, params)
    elif name == "airbnb-b":
        raw = _airbnb_b(folder, eps_rel, eps_table, params, within)
    elif name == "generated":
        raw = _generated(folder, eps_rel, eps_table, params, within)
    else:
        raise ValueError(f"unknown data set {name!r}; known: {DATASETS}")
    path = folder / f"job-{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def real_parent_sets(config: Path) -> dict[str, Any]:
    """NON-private: per foreign key, the real parents with children (as a boolean per parent row, in the parent
    file's order) and the parent's row count, read from the job's files (the keys as text)."""
    raw = yaml.safe_load(config.read_text())
    tables = raw["data"]["tables"]
    links = raw["data"]["links"] if isinstance(raw["data"]["links"], list) else [raw["data"]["links"]]
    out: dict[str, Any] = {}
    for lk in links:
        child, fk = lk["from"].split(".")
        parent, key = lk["to"].split(".")
        keys = pd.read_csv(tables[parent]["path"], usecols=[key], dtype=str)[key]
        fks = set(pd.read_csv(tables[child]["path"], usecols=[fk], dtype=str)[fk].dropna())
        out[lk["from"]] = {"parent": parent, "has": keys.isin(fks).to_numpy()}
    return out


__all__ = ["DATASETS", "airbnb_b_files", "generated_files", "real_parent_sets", "write_job"]
