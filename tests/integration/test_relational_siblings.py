"""Sibling child tables that agree (issue 36, item 3): two foreign keys into one parent keep "has children in A"
and "has children in B" jointly distributed as in the data, declared (``within``) or released (``links:siblings``)."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube.core.errors import ConfigError
from privcube.relational.stages.siblings import align_siblings, both_target, sibling_sensitivity


def _both(par_a: np.ndarray, par_b: np.ndarray, n_p: int) -> int:
    return int(np.count_nonzero((np.bincount(par_a, minlength=n_p) > 0) & (np.bincount(par_b, minlength=n_p) > 0)))


def _moves(par: np.ndarray, q: int, d: int, n_p: int):
    """Every way parent q takes a new set of ≤ d children of this link, its old ones going to other parents."""
    old = set(np.flatnonzero(par == q).tolist())
    for k in range(d + 1):
        for new in itertools.combinations(range(par.size), k):
            gone = sorted(old - set(new))
            for dest in itertools.product([r for r in range(n_p) if r != q], repeat=len(gone)):
                cand = par.copy()
                cand[list(new)] = q
                cand[gone] = dest
                yield cand


def test_count_of_parents_with_children_in_both_moves_by_at_most_d_a_plus_d_b() -> None:
    """Every neighbour (a child of either link moving to another parent; a parent taking new sets of ≤ d_A and
    ≤ d_B children, its old ones going elsewhere) of a graph built to reach the bound and of random small graphs
    moves the count of parents with children in both by at most d_A + d_B, and the bound is reached."""
    rng = np.random.default_rng(3)
    n_p, d_a, d_b = 6, 2, 1
    bound = sibling_sensitivity(d_a, d_b)
    assert bound == 3.0
    # parent 0 has A {0, 1} and B {0}; parents 1, 2 have B only, 3 and 4 A only, 5 B only: parent 0 pushing its
    # A children to 1 and 2 and its B child to 3, and taking A 3 from parent 4 and B 3 from parent 5, adds 3
    states = [(np.array([0, 0, 3, 4]), np.array([0, 1, 2, 5]))]
    while len(states) < 8:
        pa, pb = rng.integers(0, n_p, 4), rng.integers(0, n_p, 4)
        if np.bincount(pa, minlength=n_p).max() <= d_a and np.bincount(pb, minlength=n_p).max() <= d_b:
            states.append((pa, pb))
    worst, checked = 0, 0
    for pa, pb in states:
        c0 = _both(pa, pb, n_p)
        for which, (par, d) in enumerate(((pa, d_a), (pb, d_b))):
            for c in range(par.size):  # a child moves
                for r in range(n_p):
                    cand = par.copy()
                    cand[c] = r
                    if np.bincount(cand, minlength=n_p).max() <= d:
                        c1 = _both(cand, pb, n_p) if which == 0 else _both(pa, cand, n_p)
                        worst, checked = max(worst, abs(c1 - c0)), checked + 1
        for q in range(n_p):  # a parent changes with all its links in both
            for ca in _moves(pa, q, d_a, n_p):
                if np.bincount(ca, minlength=n_p).max() > d_a:
                    continue
                for cb in _moves(pb, q, d_b, n_p):
                    if np.bincount(cb, minlength=n_p).max() <= d_b:
                        worst, checked = max(worst, abs(_both(ca, cb, n_p) - c0)), checked + 1
    assert checked > 15_000 and worst == bound, (checked, worst)


def test_both_target_is_the_posterior_mean_within_what_the_counts_allow() -> None:
    # 100 parents, 30 with children here, 50 with the sibling's: between 0 and 30 have both
    assert both_target(20.0, 0.01, 100, 100, 30, 50) == 20  # a precise reading is kept
    assert both_target(-500.0, 5.0, 100, 100, 30, 50) == 0 and both_target(500.0, 5.0, 100, 100, 30, 50) == 30
    assert both_target(40.0, 1.0, 200, 100, 30, 50) == 20  # the real count scaled to the synthetic parents
    assert both_target(10.0, 1.0, 100, 100, 80, 50) == 30  # at least k + k' − n = 30 have both


def test_alignment_reaches_the_target_keeping_degrees_and_nearest_codes() -> None:
    """Whole child sets move from donors to receivers: the overlap hits the target exactly, every parent's
    degree travels with it (same children-per-parent multiset, same maximum), a donor's children stay together,
    and receivers with the donor's own codes are taken before others."""
    rng = np.random.default_rng(0)
    n_p = 400
    codes = rng.integers(0, 3, (n_p, 4))
    anchor = rng.random(n_p) < 0.4
    sj = rng.choice(np.flatnonzero(~anchor)[:150], size=500)  # all children outside the anchor's parents
    deg0 = np.bincount(sj, minlength=n_p)
    for target in (0, 60, 120):
        new, rep = align_siblings(sj, n_p, anchor, target, codes, np.random.default_rng(1))
        deg = np.bincount(new, minlength=n_p)
        assert int(np.count_nonzero((deg > 0) & anchor)) == target == rep["target_both"]
        assert sorted(deg.tolist()) == sorted(deg0.tolist())
        for p in np.unique(sj):  # each donor's children went to one parent
            assert np.unique(new[sj == p]).size == 1
        assert rep["moves"] == target and rep["children_moved"] == int(np.count_nonzero(new != sj))
    # with one receiver of the donor's exact codes among many others, that one is taken
    codes = np.zeros((6, 3), dtype=np.int64)
    codes[0] = [1, 2, 0]  # donor
    codes[4] = [1, 2, 0]  # its twin, an anchor parent
    anchor = np.array([False, False, True, True, True, True])
    new, rep = align_siblings(np.array([0, 0, 0]), 6, anchor, 1, codes, np.random.default_rng(2))
    assert new.tolist() == [4, 4, 4] and rep["code_distance"] == {"0": 1}


def _files(folder: Path, seed: int = 0, n_u: int = 1500) -> dict:
    """users <- sessions (d_max 8) and users <- devices (d_max 2): only about a third of the users have sessions
    (those with active = 1, mostly), and exactly those have one or two devices: has-devices = has-sessions."""
    rng = np.random.default_rng(seed)
    uid = np.arange(n_u) + 10_000
    active = (rng.random(n_u) < 0.35).astype(int)
    age = rng.integers(0, 4, n_u)
    pd.DataFrame({"id": uid, "active": active, "age": age}).to_parquet(folder / "users.parquet")
    with_s = np.flatnonzero(active == 1)
    with_s = with_s[rng.random(with_s.size) < 0.9]
    ns = rng.integers(1, 9, with_s.size)
    su = np.repeat(with_s, ns)
    pd.DataFrame({"user_id": uid[su], "device": rng.integers(0, 3, su.size), "hour": rng.integers(0, 4, su.size)}
                 ).to_parquet(folder / "sessions.parquet")
    nd = rng.integers(1, 3, with_s.size)
    du = np.repeat(with_s, nd)
    pd.DataFrame({"user_id": uid[du], "kind": rng.integers(0, 3, du.size)}).to_parquet(folder / "devices.parquet")
    return {"data": {"tables": {"users": {"path": "users.parquet", "domain": {"active": 2, "age": 4}, "key": "id"},
                                "sessions": {"path": "sessions.parquet", "domain": {"device": 3, "hour": 4}},
                                "devices": {"path": "devices.parquet", "domain": {"kind": 3}}},
                     "links": [{"from": "sessions.user_id", "to": "users.id"},
                               {"from": "devices.user_id", "to": "users.id"}]},
            "mechanism": {"name": "relational", "d_max": 8, "iterations": 3, "pgd_iters": 30},
            "privacy": {"tables": {n: {"epsilon": 2.0, "delta": 1e-6} for n in ("users", "sessions", "devices")},
                        "links": {"sessions.user_id": {"epsilon": 2.0, "delta": 1e-6},
                                  "devices.user_id": {"epsilon": 2.0, "delta": 1e-6, "d_max": 2}}}}


def _joint(folder: Path, out: Path | None) -> np.ndarray:
    """The 2 × 2 shares of users by (has sessions, has devices), real (``out`` None) or synthetic."""
    if out is None:
        users = pd.read_parquet(folder / "users.parquet")["id"]
        s, d = pd.read_parquet(folder / "sessions.parquet"), pd.read_parquet(folder / "devices.parquet")
    else:
        users = pd.read_parquet(out / "synthetic/users.parquet")["id"]
        s, d = pd.read_parquet(out / "synthetic/sessions.parquet"), pd.read_parquet(out / "synthetic/devices.parquet")
    hs, hd = users.isin(set(s["user_id"])).to_numpy(), users.isin(set(d["user_id"])).to_numpy()
    return np.array([[np.mean(~hs & ~hd), np.mean(~hs & hd)], [np.mean(hs & ~hd), np.mean(hs & hd)]])


def _run(cfg: dict, folder: Path, name: str, seed: int = 1) -> Path:
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    privcube.run(folder / "cfg.yaml", folder / name, seed=seed, quiet=True)
    return folder / name


def test_siblings_agree_declared_or_released(tmp_path: Path) -> None:
    """``within`` puts every synthetic user with devices among those with sessions (none without, as in the
    data); without it the count of users with both is released on devices' budget (Δ 8 + 2, charged as
    links:siblings within the link's budget) and the joint table comes closer to the real one than siblings
    learned independently (sibling_share 0)."""
    cfg = _files(tmp_path)
    real = _joint(tmp_path, None)
    assert real[0, 1] == 0 and real[1, 0] == 0
    declared = json.loads(json.dumps(cfg))
    declared["data"]["links"][1]["within"] = "sessions.user_id"
    out = _run(declared, tmp_path, "within")
    j = _joint(tmp_path, out)
    assert j[0, 1] == 0  # no user with devices and no sessions
    rep = {lk["from"]: lk["mechanism_report"] for lk in json.loads((out / "report.json").read_text())["links"]}
    assert rep["devices.user_id"]["siblings"]["mode"] == "within" and rep["devices.user_id"]["siblings"]["rho"] == 0
    assert "siblings" not in rep["sessions.user_id"]
    led = json.loads((out / "ledger.json").read_text())
    assert not [c for c in led["charges"] if c["label"].endswith("links:siblings")]

    out = _run(cfg, tmp_path, "released")
    led = json.loads((out / "ledger.json").read_text())
    (sib,) = [c for c in led["charges"] if c["label"].endswith("links:siblings")]
    assert sib["label"] == "link:devices.user_id:links:siblings"
    assert math.isclose(sib["sigma"], 10 / math.sqrt(2 * sib["rho"]), rel_tol=1e-12)
    part = led["composition"]["parts"]["devices.user_id"]
    assert part["spent"]["rho"] <= part["budget"]["rho"]
    rep = {lk["from"]: lk["mechanism_report"] for lk in json.loads((out / "report.json").read_text())["links"]}
    s = rep["devices.user_id"]["siblings"]
    assert s["mode"] == "released" and s["anchor"] == "sessions.user_id" and s["rho"] == sib["rho"]
    released = _joint(tmp_path, out)
    from privcube.report.page import render_report

    page = render_report(out)
    assert "siblings.mode" in page and "released" in page and "degrees.share_with_children_error" in page
    indep = dict(cfg, mechanism={**cfg["mechanism"], "sibling_share": 0})
    independent = _joint(tmp_path, _run(indep, tmp_path, "independent"))
    tv = lambda a: 0.5 * float(np.abs(a - real).sum())  # noqa: E731
    assert tv(released) < tv(independent)
    assert tv(j) <= 0.1 and tv(released) <= 0.1


def test_within_must_name_an_earlier_key_into_the_same_parent(tmp_path: Path) -> None:
    cfg = _files(tmp_path, n_u=60)
    for within, needle in (("devices.user_id", "not a foreign key listed before"), ("nope", "must look like"),
                           ("sessions.device", "not a foreign key listed before")):
        bad = json.loads(json.dumps(cfg))
        bad["data"]["links"][1]["within"] = within
        with pytest.raises(ConfigError) as e:
            _run(bad, tmp_path, "bad")
        assert needle in str(e.value) and "data.links[1].within" in str(e.value) and "\n" not in str(e.value)
        assert not (tmp_path / "bad").exists()


def test_plan_states_the_sibling_step(tmp_path: Path) -> None:
    """The plan says, per later sibling, what it spends and how precisely (Δ = d_A + d_B), or that it is declared."""
    from privcube import api

    cfg = _files(tmp_path, n_u=60)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    lps = {lp["link"].split(" ")[0]: lp for lp in api.plan(tmp_path / "cfg.yaml", links=200).details["links"]}
    dev = lps["devices.user_id"]
    assert "siblings: the parents with children in both sessions.user_id and this link" in dev["degree_release"]
    assert "sensitivity d_max 8 + 2 = 10" in dev["degree_release"] and dev["rho_siblings"] > 0
    assert "siblings" not in lps["sessions.user_id"]["degree_release"]
    cfg["data"]["links"][1]["within"] = "sessions.user_id"
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    dev = {lp["link"].split(" ")[0]: lp for lp in api.plan(tmp_path / "cfg.yaml", links=200).details["links"]}[
        "devices.user_id"]
    assert "declared within sessions.user_id" in dev["degree_release"] and dev["rho_siblings"] == 0
