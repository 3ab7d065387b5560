"""``privcube plan`` of relational jobs (issue 17): data-free, the schedule a run then follows."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from privcube import api
from privcube.core.errors import ConfigError
from privcube.privacy.zcdp import cdp_rho

from relational_files import _m2m_files, _o2m_files  # noqa: E402
from relational_files import LINK_BUD, _files  # noqa: E402


def _write(cfg: dict, folder: Path) -> Path:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_plan_reads_no_data_and_states_every_part(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    for name in ("parents", "children"):  # the data files are gone: a plan must not need them
        (tmp_path / cfg["data"]["tables"][name]["path"]).unlink()
    plan = api.plan(_write(cfg, tmp_path))
    assert plan.mechanism == "relational"
    parts = plan.privacy["parts"]
    assert set(parts) == {"parents", "children", "links"}
    assert math.isclose(plan.privacy["epsilon"], 1.0 + 0.5 + 1.0, rel_tol=1e-12)
    assert math.isclose(plan.privacy["rho"], sum(p["rho"] for p in parts.values()), rel_tol=1e-12)
    assert math.isclose(parts["children"]["rho"], cdp_rho(0.5, 2e-6), rel_tol=1e-9)
    # stage 1: all 2-way marginals of each table (table_marginals default 2)
    assert plan.details["tables"]["parents"]["marginals"] == 1
    assert plan.details["tables"]["children"]["marginals"] == 3
    assert {g["table"] for g in plan.groups} == {"parents", "children"}
    (link,) = plan.details["links"]
    assert link["link"] == "children.parent_id -> parents.id" and link["kind"] == "one_to_many"
    assert link["d_max"] == 10 and link["rho"] == parts["links"]["rho"]
    # degree_share auto: decided from the public number of parents at run time; without it, its upper end
    rho = parts["links"]["rho"]
    assert link["rho_degrees"] == pytest.approx(0.25 * rho, rel=1e-12)
    # the release's form and the error of the share of parents with children it reads, stated at a few sizes:
    # ρ = d²/(2·0.03²·N²) within 0.05..0.25 of the links budget; two values (std d/(√(2ρ)·N)) unless the binned
    # zero bin (std √(6d² + 6d + 2)/(√(2ρ)·N)) is as precise
    text = link["degree_release"]
    assert text.startswith("the children-per-parent histogram (degree_share auto")
    for n, share, form, std in ((1_000, 0.25, "two values", 10 / (math.sqrt(2 * 0.25 * rho) * 1_000)),
                                (10_000, 0.05, "two values", 10 / (math.sqrt(2 * 0.05 * rho) * 1e4)),
                                (100_000, 0.05, "11 bins", math.sqrt(662) / (math.sqrt(2 * 0.05 * rho) * 1e5))):
        assert f"{n:,} parents: share {share:.3g}, {form}, std {std:.3g}" in text
    # without the public link count, max_noise's measurement count is bounded, not claimed
    assert "at most" in link["measurements"] and link["count_noise_std_max"] > 0
    assert link["score"].startswith("auto: gain from 2000 links")  # 200 · d_max, decided once m is known


def test_plan_with_links_is_the_schedule_the_run_follows(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    path = _write(cfg, tmp_path)
    out = tmp_path / "run"
    api.run(path, out, seed=3, quiet=True)
    report = json.loads((out / "report.json").read_text())
    priv = report["mechanism_report"]["privacy"] if "mechanism_report" in report else report["privacy"]
    m = 160  # the fixture's links (every child has a parent; degrees capped at 8 < d_max)
    (link,) = api.plan(path, links=m).details["links"]
    assert link["links"] == m
    assert link["em_epsilon"] == pytest.approx(priv["em_epsilon"], rel=1e-12)
    assert link["informative"] == priv["informative"]
    assert priv["selections"] <= link["measurements"]
    # degree_share auto: the plan states its upper end; the run takes the share for its public 40 parents
    assert link["rho_degrees"] == pytest.approx(0.25 * link["rho"], rel=1e-12)
    need = 10 * 10 / (2 * 0.03 ** 2 * 40 ** 2) / link["rho"]
    assert priv["rho_degrees"] == pytest.approx(min(max(need, 0.05), 0.25) * link["rho"], rel=1e-12)
    assert link["score"] == priv["score"] == "aim"  # 160 links < 200 · d_max 10


def test_plan_of_a_schema_graph_lists_each_link_with_its_budget(tmp_path: Path) -> None:
    plan = api.plan(_write(_files(tmp_path), tmp_path), links=500)
    links = {lk["link"]: lk for lk in plan.details["links"]}
    assert set(links) == {"sessions.user_id -> users.id", "bookings.user_id -> users.id"}
    for lk in links.values():
        eps, delta = LINK_BUD[lk["link"].split(" ")[0]]
        assert lk["rho"] == pytest.approx(cdp_rho(eps, delta), rel=1e-9)
    assert set(plan.details["tables"]) == {"users", "sessions", "bookings"}


def test_plan_of_many_to_many_states_when_degrees_are_released(tmp_path: Path) -> None:
    """The many-to-many degree release depends on the public table sizes, which a plan does not read: it states
    σ, ρ and the rows from which it happens (σ·√2/0.12 for two bins), and a run on tables below that spends
    nothing on it."""
    from privcube.relational.stages.degree_histograms import degree_sigma

    cfg = _m2m_files(tmp_path)
    path = _write(cfg, tmp_path)
    (link,) = api.plan(path).details["links"]
    sigma = degree_sigma(15, 0.05 * 0.05, False)  # d_max 15, degree_share of links rho 0.05
    assert f"sigma {sigma:.4g}" in link["degree_release"]
    assert f"at least {math.ceil(sigma * math.sqrt(2) / 0.12)} rows" in link["degree_release"]
    assert link["rho_degrees"] == 0.0  # not counted on in the schedule without sizes
    text = subprocess.run([sys.executable, "-m", "privcube", "plan", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert text.returncode == 0, text.stderr
    assert f"  degree release: each side's links-per-record histogram, sigma {sigma:.4g}" in text.stdout
    out = tmp_path / "run"
    api.run(path, out, seed=3, quiet=True)
    report = json.loads((out / "report.json").read_text())
    mech = report.get("mechanism_report", report)
    assert mech["privacy"]["rho_degrees"] == 0.0 and "cannot inform" in mech["degrees"]["source"]
    ledger = json.loads((out / "ledger.json").read_text())
    assert not [c for c in ledger["charges"] if c["label"].endswith("links:degrees")]


def test_plan_links_flag_errors(tmp_path: Path) -> None:
    path = _write(_o2m_files(tmp_path), tmp_path)
    with pytest.raises(ConfigError, match="links must be a positive number of links, got 0"):
        api.plan(path, links=0)
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump({"data": {"path": "x.parquet", "domain": {"a": 2, "b": 3}},
                                      "mechanism": "residual-planner", "workload": [{"kway": 1}],
                                      "privacy": {"epsilon": 1, "delta": 1e-6}}))
    with pytest.raises(ConfigError, match="relational jobs only"):
        api.plan(single, links=10)


def test_cli_plan_relational_text_and_json(tmp_path: Path) -> None:
    path = _write(_o2m_files(tmp_path), tmp_path)
    text = subprocess.run([sys.executable, "-m", "privcube", "plan", str(path), "--links", "160"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "link children.parent_id -> parents.id (one_to_many)" in text.stdout
    assert "table children: 3 marginals" in text.stdout
    assert "; selection score aim" in text.stdout  # 160 links: m / d_max = 16 < 200
    js = subprocess.run([sys.executable, "-m", "privcube", "plan", str(path), "--json"],
                        capture_output=True, text=True, timeout=120)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["details"]["links"][0]["kind"] == "one_to_many"


def test_plan_takes_a_link_count_per_link(tmp_path: Path) -> None:
    """A schema graph's links have their own public counts: ``links={name: M}`` (CLI ``--links NAME=M``, the
    names of ``privacy.links``); a link not named is planned without its count; unknown names are refused."""
    path = _write(_files(tmp_path), tmp_path)
    plan = api.plan(path, links={"sessions.user_id": 500, "bookings.user_id": 300})
    links = {lk["link"].split(" ")[0]: lk for lk in plan.details["links"]}
    assert links["sessions.user_id"]["links"] == 500 and links["bookings.user_id"]["links"] == 300
    part = api.plan(path, links={"bookings.user_id": 300}).details["links"]
    assert "links" not in part[0] and "at most" in part[0]["measurements"] and part[1]["links"] == 300
    with pytest.raises(ConfigError, match=r"unknown link\(s\) \['sessions.userid'\]"):
        api.plan(path, links={"sessions.userid": 500})
    with pytest.raises(ConfigError, match=r"links\['bookings.user_id'\] must be a positive number"):
        api.plan(path, links={"bookings.user_id": 0})
    cli = [sys.executable, "-m", "privcube", "plan", str(path), "--json"]
    ok = subprocess.run(cli + ["--links", "sessions.user_id=500", "--links", "bookings.user_id=300"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert [lk.get("links") for lk in json.loads(ok.stdout)["details"]["links"]] == [500, 300]
    mixed = subprocess.run(cli + ["--links", "500", "--links", "bookings.user_id=300"], capture_output=True,
                           text=True, timeout=120)
    assert mixed.returncode == 2 and mixed.stderr.count("\n") == 1 and "not both" in mixed.stderr


def test_plan_states_the_measure_all_round(tmp_path: Path) -> None:
    """When the public measure-all test fires (many links), the plan says so: how many workloads, their ρ
    and count noise, and the releases in all (measure-all's, then the draws on the candidates left)."""
    from privcube.relational.stages.parameters import check_params
    from privcube.relational.stages.selection import links_schedule
    from privcube.relational.config import load_relational_config

    path = _write(_o2m_files(tmp_path), tmp_path)
    (link,) = api.plan(path, links=1_000_000).details["links"]
    job = load_relational_config(yaml.safe_load(path.read_text()), tmp_path)
    p = check_params(job.params)
    cand, sched, _ = links_schedule(p, "one_to_many", False, job.tables["children"].domain,
                                    job.tables["parents"].domain, job.parts["links"].rho, 1_000_000)
    assert sched.first and link["measure_all"]["workloads"] == len(sched.first)
    assert link["measure_all"]["rho"] == pytest.approx(sum(sched.first_rho), rel=1e-12)
    assert link["measurements"] == len(sched.first) + link["drawn"]
    assert link["drawn"] == min(len(cand) - len(sched.first), sched.T * sched.K)
    text = subprocess.run([sys.executable, "-m", "privcube", "plan", str(path), "--links", "1000000"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert f"  measured first, without selection: {len(sched.first)} lowest-order workloads" in text.stdout
