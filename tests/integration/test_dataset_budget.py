"""One budget per dataset across runs (issue 37): ``privcube budget init/show`` and ``privacy.budget_file``.

Exhaustion across runs, refusal before any data is read (no run folder), concurrent runs in two real
processes, crash + resume charging once, a corrupted or edited record refused in one line, and a run that
fails before measuring charging nothing."""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube.core.errors import BudgetError
from privcube.privacy.budget import PrivacyBudget
from privcube.dataset_budget import composed_epsilon, show_budget
from privcube.privacy.zcdp import cdp_epsilon

KILL = Path(__file__).resolve().parents[1] / "support" / "checkpoint_kill.py"
DOMAIN = {"a": 3, "b": 4, "c": 2}


def cli(*args: str, stop_after: int | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    head = [sys.executable, "-m", "privcube"] if stop_after is None else [sys.executable, str(KILL), str(stop_after)]
    return subprocess.run([*head, *args], capture_output=True, text=True, timeout=timeout)


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def make_data(folder: Path, n: int = 3000) -> Path:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, n)
    frame = pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, n)) % 4, "c": rng.integers(0, 2, n)})
    path = folder / "data.parquet"
    frame.to_parquet(path, index=False)
    return path


def job(folder: Path, name: str, budget_file: str | None, *, mechanism: object = "residual-planner",
        privacy: dict | None = None, data: Path | None = None, **extra: object) -> Path:
    privacy = dict(privacy or {"epsilon": 1.0, "delta": 1e-9})
    if budget_file is not None:
        privacy["budget_file"] = budget_file
    cfg = {"data": {"path": str(data or folder / "data.parquet")}, "domain": DOMAIN, "mechanism": mechanism,
           "workload": [{"kway": 2}], "privacy": privacy, "cluster": {"type": "threads"}, **extra}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    make_data(tmp_path)
    return tmp_path


def test_init_and_show(folder: Path) -> None:
    b = folder / "census.budget"
    r = cli("budget", "init", str(b), "--epsilon", "2", "--delta", "1e-9")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(b.stat().st_mode) == 0o600
    r = cli("budget", "show", str(b))
    assert r.returncode == 0 and "epsilon=2" in r.stdout and "runs: none yet" in r.stdout
    status = json.loads(cli("budget", "show", str(b), "--json").stdout)
    assert status["budget"]["epsilon"] == 2 and status["spent"]["epsilon"] == 0 and status["runs"] == []
    assert status["budget"]["rho"] == pytest.approx(PrivacyBudget.from_epsilon_delta(2, 1e-9).rho)
    # a budget is never reset: init on an existing file is refused in one line, the file unchanged
    before = b.read_bytes()
    r = cli("budget", "init", str(b), "--epsilon", "5", "--delta", "1e-9")
    assert r.returncode == 2 and "exists" in one_line(r) and b.read_bytes() == before
    r = cli("budget", "init", str(folder / "x.budget"), "--epsilon", "1", "--delta", "0.5")
    assert r.returncode == 2 and "delta" in one_line(r) and not (folder / "x.budget").exists()
    r = cli("budget", "show", str(folder / "missing.budget"))
    assert r.returncode == 2 and "does not exist" in one_line(r)


def test_runs_exhaust_the_budget_then_refused_before_reading_data(folder: Path) -> None:
    """Three runs of (1, 1e-9) on a (1.6, 1e-9) budget: zCDP composition fits two (1.44), not three (1.78);
    the third is refused in one line before its data is read (its data holds a value outside the domain,
    which reading would report) and writes no run folder."""
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "1.6", "--delta", "1e-9").returncode == 0
    cfg = job(folder, "rp", "b.budget")  # relative to the config's folder
    for i in (1, 2):
        r = cli("run", str(cfg), "--out", str(folder / f"run{i}"), "--seed", str(i), "--quiet", "--no-report")
        assert r.returncode == 0, r.stderr
        saved = yaml.safe_load((folder / f"run{i}" / "config.yaml").read_text())
        assert saved["privacy"]["budget_file"] == str(b)  # resolved: the run folder's config names the same file
    rho = PrivacyBudget.from_epsilon_delta(1.0, 1e-9).rho
    status = show_budget(b)
    assert [x["state"] for x in status["runs"]] == ["settled", "settled"]
    assert status["spent"]["rho"] == pytest.approx(2 * rho, rel=1e-9)
    assert status["spent"]["epsilon"] == pytest.approx(cdp_epsilon(2 * rho, 1e-9), rel=1e-9)
    bad = folder / "out-of-domain.parquet"  # read, it would fail naming column 'b'
    pd.DataFrame({"a": [0, 1], "b": [0, 9], "c": [0, 1]}).to_parquet(bad, index=False)
    third = job(folder, "rp3", str(b), data=bad)
    r = cli("run", str(third), "--out", str(folder / "run3"), "--quiet", "--no-report")
    assert r.returncode == 2
    line = one_line(r)
    assert "does not fit" in line and "b.budget" in line and "epsilon=1.6" in line
    assert not (folder / "run3").exists()
    assert len(show_budget(b)["runs"]) == 2
    text = cli("budget", "show", str(b)).stdout
    assert text.count("residual-planner") == 2 and "run1" in text and "run2" in text
    assert f"spent: epsilon={cdp_epsilon(2 * rho, 1e-9):.6g}" in text


def _reserve_in_child(path: str, out: str, barrier: object, results: object) -> None:
    from privcube.config import load_config
    from privcube.dataset_budget import reserve

    cfg = load_config({"domain": DOMAIN, "mechanism": "residual-planner", "workload": [{"kway": 1}],
                       "privacy": {"epsilon": 1.0, "delta": 1e-9, "budget_file": path}}, need_data=False)
    barrier.wait()  # type: ignore[attr-defined]
    try:
        reserve(cfg, out, {"mechanism": "residual-planner", "seed": None, "config": out}, resume=False)
        results.put("ok")  # type: ignore[attr-defined]
    except BudgetError:
        results.put("refused")  # type: ignore[attr-defined]


def test_many_processes_racing_for_a_budget(tmp_path: Path) -> None:
    """Eight processes reserve at once (released together by a barrier); a budget that holds exactly three
    runs admits three."""
    b = tmp_path / "b.budget"
    rho = PrivacyBudget.from_epsilon_delta(1.0, 1e-9).rho
    eps3 = cdp_epsilon(3 * rho, 1e-9)
    assert cli("budget", "init", str(b), "--epsilon", repr(eps3 * 1.001), "--delta", "1e-9").returncode == 0
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_reserve_in_child, args=(str(b), str(tmp_path / f"o{i}"), barrier, results))
             for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got = sorted(results.get(timeout=10) for _ in procs)
    assert got.count("ok") == 3 and got.count("refused") == 5
    assert len(show_budget(b)["runs"]) == 3


def test_two_concurrent_runs_cannot_both_pass(folder: Path) -> None:
    """Two `privcube run` processes started together on a budget that holds one run: one completes, the other
    is refused in one line without a run folder, and the budget shows one run."""
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "1.2", "--delta", "1e-9").returncode == 0
    cfg = job(folder, "rp", str(b))
    procs = [subprocess.Popen([sys.executable, "-m", "privcube", "run", str(cfg), "--out", str(folder / f"run{i}"),
                               "--quiet", "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    loser = next(i for i, p in enumerate(procs) if p.returncode == 2)
    lines = [ln for ln in outs[loser][1].splitlines() if ln.strip()]
    assert len(lines) == 1 and "does not fit" in lines[0]
    assert not (folder / f"run{loser + 1}").exists() and (folder / f"run{2 - loser}" / ".complete").exists()
    status = show_budget(b)
    assert [x["state"] for x in status["runs"]] == ["settled"]


def test_crash_then_resume_charges_once(folder: Path) -> None:
    """aim-grem killed (SIGKILL) after checkpoint round 2 keeps its reservation (charged in full: it measured);
    `--resume` reuses it and settles once, at the run's spend."""
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "1.3", "--delta", "1e-9").returncode == 0
    cfg = job(folder, "aim", str(b), mechanism="aim-grem")
    out = folder / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "4", "--quiet", "--no-report", stop_after=2)
    assert r.returncode == -signal.SIGKILL, r.stderr
    status = show_budget(b)
    assert [x["state"] for x in status["runs"]] == ["reserved"]
    rho = PrivacyBudget.from_epsilon_delta(1.0, 1e-9).rho
    assert status["spent"]["rho"] == pytest.approx(rho)
    # another run does not fit beside the open reservation
    other = cli("run", str(cfg), "--out", str(folder / "other"), "--quiet", "--no-report")
    assert other.returncode == 2 and "does not fit" in one_line(other) and not (folder / "other").exists()
    # a --resume with another seed is another run: it does not fit beside the interrupted one's reservation,
    # which stays as it was
    wrong = cli("run", str(cfg), "--out", str(out), "--seed", "5", "--resume", "--quiet", "--no-report")
    assert wrong.returncode == 2 and "does not fit" in one_line(wrong)
    assert [x["state"] for x in show_budget(b)["runs"]] == ["reserved"]
    r = cli("run", str(cfg), "--out", str(out), "--seed", "4", "--resume", "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    status = show_budget(b)
    assert len(status["runs"]) == 1 and status["runs"][0]["state"] == "settled" and status["runs"][0]["resumed"] == 1
    ledger = json.loads((out / "ledger.json").read_text())
    assert status["spent"]["rho"] == pytest.approx(ledger["spent"]["rho"], rel=1e-12)
    assert status["spent"]["rho"] <= rho * (1 + 1e-9)
    records = [ln.split("\t")[0] for ln in b.read_text().splitlines()]
    assert [json.loads(x)["type"] for x in records] == ["budget", "reserve", "resume", "settle"]


def test_run_failing_before_measuring_charges_nothing(folder: Path) -> None:
    """A value outside the domain stops the run before any measurement is released: its reservation is
    released, the budget left is unchanged, and a correct run then fits."""
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "1.2", "--delta", "1e-9").returncode == 0
    bad = folder / "bad.parquet"
    frame = pd.read_parquet(folder / "data.parquet")
    frame.loc[7, "b"] = 9
    frame.to_parquet(bad, index=False)
    r = cli("run", str(job(folder, "bad", str(b), data=bad)), "--out", str(folder / "bad-run"), "--quiet")
    assert r.returncode == 2 and "'b'" in one_line(r)
    status = show_budget(b)
    assert [x["state"] for x in status["runs"]] == ["released"] and status["spent"]["rho"] == 0.0
    r = cli("run", str(job(folder, "good", str(b))), "--out", str(folder / "good-run"), "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    assert [x["state"] for x in show_budget(b)["runs"]] == ["released", "settled"]
    assert "released (failed before measuring" in cli("budget", "show", str(b)).stdout


@pytest.mark.parametrize("damage", ["edit", "corrupt", "truncate", "delete"])
def test_edited_or_corrupted_record_is_refused_in_one_line(folder: Path, damage: str) -> None:
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "3", "--delta", "1e-9").returncode == 0
    cfg = job(folder, "rp", str(b))
    assert cli("run", str(cfg), "--out", str(folder / "run1"), "--quiet", "--no-report").returncode == 0
    lines = b.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3  # budget, reserve, settle
    if damage == "edit":  # lower the settled spend by hand (the checksum is left as it was)
        rec, digest = lines[2].split(b"\t")
        data = json.loads(rec)
        data["amount"]["rho"] /= 10
        lines[2] = json.dumps(data, sort_keys=True, separators=(",", ":")).encode() + b"\t" + digest
        where = "record 3"
    elif damage == "corrupt":
        lines[1] = lines[1][:20] + bytes([lines[1][20] ^ 0x01]) + lines[1][21:]
        where = "record 2"
    elif damage == "truncate":
        lines[2] = lines[2][:-10]
        where = "incomplete"
    else:  # a run's reservation removed: the settle after it no longer chains
        del lines[1]
        where = "record 2"
    b.write_bytes(b"".join(lines))
    r = cli("budget", "show", str(b))
    assert r.returncode == 2 and where in one_line(r) and str(b) in one_line(r)
    r = cli("run", str(cfg), "--out", str(folder / "run2"), "--quiet", "--no-report")
    assert r.returncode == 2 and where in one_line(r)
    assert not (folder / "run2").exists()


def test_pure_runs_compose_by_their_epsilon(folder: Path) -> None:
    """hdmm with Laplace noise at ε 0.5: two runs fit a (1, 1e-9) budget by adding their ε (the zCDP reading
    alone, ε(0.25, 1e-9) ≈ 4.4, would refuse even one); a third is refused."""
    assert composed_epsilon([{"rho": 0.125, "epsilon": 0.5, "pure": True}] * 2, 1e-9) == pytest.approx(1.0)
    many = [{"rho": 0.005 ** 2 / 2, "epsilon": 0.005, "pure": True}] * 400  # many small ones: the zCDP sum is tighter
    assert composed_epsilon(many, 1e-9) < 2.0 and composed_epsilon(many, 1e-9) == pytest.approx(
        cdp_epsilon(400 * 0.005 ** 2 / 2, 1e-9))
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "1", "--delta", "1e-9").returncode == 0
    cfg = job(folder, "hdmm", str(b), mechanism={"name": "hdmm", "noise": "laplace", "restarts": 1},
              privacy={"epsilon": 0.5}, workload=[{"attributes": ["a", "b"]}])
    for i in (1, 2):
        r = cli("run", str(cfg), "--out", str(folder / f"run{i}"), "--quiet", "--no-report")
        assert r.returncode == 0, r.stderr
    status = show_budget(b)
    assert status["spent"]["epsilon"] == pytest.approx(1.0) and all(x["pure"] for x in status["runs"])
    r = cli("run", str(cfg), "--out", str(folder / "run3"), "--quiet", "--no-report")
    assert r.returncode == 2 and "does not fit" in one_line(r)


def people_file(folder: Path, rows_each: int) -> Path:
    """``people.parquet``: the data with a ``person`` column, ``rows_each`` consecutive rows a person."""
    frame = pd.read_parquet(folder / "data.parquet")
    frame["person"] = np.arange(len(frame)) // rows_each
    frame.to_parquet(folder / "people.parquet", index=False)
    return folder / "people.parquet"


def test_units_do_not_mix_and_analytic_is_refused(folder: Path) -> None:
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "5", "--delta", "1e-9").returncode == 0
    people_file(folder, rows_each=2)
    rows = job(folder, "rows", str(b))
    assert cli("run", str(rows), "--out", str(folder / "r1"), "--quiet", "--no-report").returncode == 0
    people = job(folder, "people", str(b), data=folder / "people.parquet", privacy_unit={"id": "person", "max_rows": 2})
    r = cli("run", str(people), "--out", str(folder / "r2"), "--quiet", "--no-report")
    assert r.returncode == 2 and "privacy unit" in one_line(r) and not (folder / "r2").exists()
    analytic = job(folder, "an", str(b), mechanism={"name": "hdmm", "calibration": "analytic", "restarts": 1})
    r = cli("run", str(analytic), "--out", str(folder / "r3"), "--quiet", "--no-report")
    assert r.returncode == 2 and "analytic" in one_line(r) and not (folder / "r3").exists()
    assert len(show_budget(b)["runs"]) == 1


def test_person_level_runs_are_charged_per_person(folder: Path) -> None:
    """Under privacy_unit the dataset is charged the person-level spend that ledger.json records."""
    b = folder / "b.budget"
    assert cli("budget", "init", str(b), "--epsilon", "3", "--delta", "1e-9").returncode == 0
    people_file(folder, rows_each=3)
    cfg = job(folder, "people", str(b), data=folder / "people.parquet", privacy_unit={"id": "person", "max_rows": 2})
    assert cli("run", str(cfg), "--out", str(folder / "r"), "--quiet", "--no-report").returncode == 0
    ledger = json.loads((folder / "r" / "ledger.json").read_text())
    status = show_budget(b)
    assert status["spent"]["rho"] == pytest.approx(ledger["spent"]["rho"], rel=1e-12)
    assert math.isclose(ledger["spent"]["epsilon"], 1.0, rel_tol=1e-9)
    assert status["runs"][0]["unit"] == "person"


def test_budget_file_key_is_checked(folder: Path) -> None:
    cfg = job(folder, "bad", None, privacy={"epsilon": 1.0, "delta": 1e-9, "budget_file": 3})
    r = cli("run", str(cfg), "--out", str(folder / "r"), "--quiet")
    assert r.returncode == 2 and "budget_file" in one_line(r) and not (folder / "r").exists()
    cfg = job(folder, "missing", "nowhere.budget")
    r = cli("run", str(cfg), "--out", str(folder / "r"), "--quiet")
    assert r.returncode == 2 and "does not exist" in one_line(r) and not (folder / "r").exists()
    # plan reads no budget file and charges nothing
    assert cli("plan", str(cfg)).returncode == 0
    assert os.path.exists(folder / "nowhere.budget") is False
