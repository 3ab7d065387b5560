"""PrivacyLedger: composition, refusal of overspending, ledger.json layout and persistence."""
from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from privcube.core.errors import BudgetError
from privcube.privacy import NoiseSource, PrivacyBudget, PrivacyLedger, cdp_epsilon


def test_zcdp_charges_add_rho_and_report_epsilon() -> None:
    budget = PrivacyBudget.from_rho(0.5, delta=1e-9)
    led = PrivacyLedger(budget)
    assert led.spent == {"rho": 0.0, "epsilon": 0.0, "delta": 0.0}
    led.charge("marginal age", rho=0.1, sigma=2.236)
    led.charge("select round 1", epsilon=0.4)  # pure ε costs ε²/2 = 0.08
    assert led.spent["rho"] == pytest.approx(0.18)
    assert led.remaining_rho == pytest.approx(0.32)
    # Bun–Steinke: ε(ρ=0.18, δ=1e-9) lies below ρ + 2√(ρ ln 1e9)
    assert 0 < led.spent["epsilon"] < 0.18 + 2 * math.sqrt(0.18 * math.log(1e9))
    assert led.spent["delta"] == 1e-9
    assert led.remaining_epsilon == pytest.approx(budget.epsilon - led.spent["epsilon"])
    assert [c["label"] for c in led.charges] == ["marginal age", "select round 1"]
    assert led.charges[0]["sigma"] == 2.236 and led.charges[1]["rho"] == pytest.approx(0.08)


def test_refuses_overspending_and_records_nothing() -> None:
    led = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    led.charge("a", rho=0.7)
    before = led.to_dict()
    with pytest.raises(BudgetError, match=r"'b'.*remaining rho=0\.3"):
        led.charge("b", rho=0.30001)
    assert led.to_dict() == before
    led.charge("c", rho=0.3)  # exactly the remainder is fine
    assert led.remaining_rho == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(BudgetError, match="'d'"):
        led.charge("d", rho=1e-6)
    assert len(led.charges) == 2


def test_float_roundoff_tolerated_but_no_more() -> None:
    led = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    for i in range(10):
        led.charge(f"part {i}", rho=0.1)  # 10 × 0.1 sums to 0.9999999999999999
    led2 = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    led2.charge("x", rho=1.0 + 5e-10)
    with pytest.raises(BudgetError):
        PrivacyLedger(PrivacyBudget.from_rho(1.0)).charge("y", rho=1.0 + 1e-8)
    assert len(led.charges) == 10


def test_pure_budget_composes_epsilon() -> None:
    led = PrivacyLedger(PrivacyBudget.from_config({"epsilon": 1.0}))
    led.charge("laplace 1", epsilon=0.25)
    led.charge("laplace 2", epsilon=0.5)
    assert led.spent == {"rho": pytest.approx(0.25**2 / 2 + 0.5**2 / 2), "epsilon": 0.75, "delta": 0.0}
    assert led.remaining_epsilon == pytest.approx(0.25)
    assert led.guarantee == "pure"
    with pytest.raises(BudgetError, match="remaining epsilon=0.25"):
        led.charge("laplace 3", epsilon=0.3)
    assert len(led.charges) == 2
    led.charge("gaussian", rho=0.1)  # pure budgets may be spent by Gaussians against ε²/2
    assert led.guarantee == "zcdp"
    with pytest.raises(BudgetError, match="rho"):
        led.charge("gaussian 2", rho=0.5 - (0.25**2 / 2 + 0.5**2 / 2) - 0.1 + 1e-6)
    led.charge("gaussian 3", rho=0.5 - (0.25**2 / 2 + 0.5**2 / 2) - 0.1)
    assert led.spent["rho"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "kwargs,match",
    [({}, "exactly one"), ({"rho": 0.1, "epsilon": 0.1}, "exactly one"), ({"rho": -0.1}, "rho"),
     ({"epsilon": float("nan")}, "epsilon"), ({"rho": 0.1, "delta": 1e-6}, "delta")],
)
def test_bad_charges_named(kwargs: dict, match: str) -> None:
    led = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    with pytest.raises(BudgetError, match=match):
        led.charge("bad", **kwargs)
    assert led.charges == []
    with pytest.raises(BudgetError, match="label"):
        led.charge("", rho=0.1)


def test_to_dict_layout_and_save_load_round_trip(tmp_path: Path) -> None:
    led = PrivacyLedger(PrivacyBudget.from_epsilon_delta(1.0, 1e-9), noise=NoiseSource(seed=9))
    led.charge("aim init", rho=0.002, attrs=("age", "sex"), sigma=np.float64(3.5), n=np.int64(4))
    led.charge("aim select 1", epsilon=0.05, round=1)
    path = tmp_path / "run" / "ledger.json"
    led.save(path)
    raw = json.loads(path.read_text())
    assert set(raw) == {"budget", "spent", "charges", "noise"}
    assert set(raw["budget"]) == set(raw["spent"]) == {"rho", "epsilon", "delta"}
    assert raw["budget"]["rho"] == pytest.approx(0.014973, rel=5e-5)
    assert raw["noise"] == {"seeded": True, "seed": 9}
    assert raw["charges"][0]["attrs"] == ["age", "sex"] and raw["charges"][0]["n"] == 4
    assert raw["spent"]["epsilon"] == pytest.approx(cdp_epsilon(0.002 + 0.05**2 / 2, 1e-9))
    assert [p.name for p in path.parent.iterdir()] == ["ledger.json"]  # no temp file left
    back = PrivacyLedger.load(path)
    assert back.to_dict() == raw
    assert back.remaining_rho == pytest.approx(led.remaining_rho)
    with pytest.raises(BudgetError):
        back.charge("too much", rho=back.remaining_rho * 2)


def test_pure_ledger_round_trip_and_unseeded_noise(tmp_path: Path) -> None:
    led = PrivacyLedger(PrivacyBudget.pure_epsilon(2.0), noise=NoiseSource())
    led.charge("laplace", epsilon=1.5, strategy="identity")
    led.save(tmp_path / "ledger.json")
    back = PrivacyLedger.load(tmp_path / "ledger.json")
    assert back.budget.pure and back.spent["epsilon"] == 1.5
    assert back.to_dict()["noise"] == {"seeded": False, "seed": None}
    with pytest.raises(BudgetError, match="epsilon"):
        back.charge("more", epsilon=0.6)


def test_save_overwrites_atomically_and_load_errors(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    led = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    led.save(path)
    led.charge("a", rho=0.5)
    led.save(path)
    assert json.loads(path.read_text())["spent"]["rho"] == 0.5
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BudgetError, match="broken.json"):
        PrivacyLedger.load(tmp_path / "broken.json")
    with pytest.raises(BudgetError, match="budget"):
        PrivacyLedger.from_dict({"charges": []})


def test_ledger_pickles() -> None:
    led = PrivacyLedger(PrivacyBudget.from_rho(1.0))
    led.charge("a", rho=0.25)
    back = pickle.loads(pickle.dumps(led))
    back.charge("b", rho=0.75)
    assert back.spent["rho"] == pytest.approx(1.0) and led.spent["rho"] == 0.25


def test_one_shot_epsilon_delta_release_uses_the_whole_budget() -> None:
    """An analytic-Gaussian style (ε, δ) charge is the run's only charge, within the budget's (ε, δ)."""
    budget = PrivacyBudget.from_epsilon_delta(1.0, 1e-6)
    led = PrivacyLedger(budget)
    with pytest.raises(BudgetError, match="exceeds"):
        led.charge("too much", epsilon=1.1, delta=1e-6)
    with pytest.raises(BudgetError, match="exceeds"):
        led.charge("too much delta", epsilon=1.0, delta=2e-6)
    led.charge("analytic gaussian", epsilon=1.0, delta=1e-6)
    assert led.spent == {"rho": budget.rho, "epsilon": 1.0, "delta": 1e-6}
    with pytest.raises(BudgetError):
        led.charge("anything else", rho=1e-6)
    again = PrivacyLedger.from_dict(led.to_dict())
    assert again.spent == led.spent
    # not after another charge, and never on a pure budget
    led2 = PrivacyLedger(budget)
    led2.charge("first", rho=budget.rho / 10)
    with pytest.raises(BudgetError, match="only"):
        led2.charge("second", epsilon=0.5, delta=1e-7)
    with pytest.raises(BudgetError, match="pure"):
        PrivacyLedger(PrivacyBudget.pure_epsilon(1.0)).charge("x", epsilon=0.5, delta=1e-7)
