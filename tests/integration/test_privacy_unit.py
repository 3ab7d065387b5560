"""Person-level privacy: ``privacy_unit: {id, max_rows: K}``, truncation to K rows per person, scaled charges.

The central check is a brute-force neighbour enumeration on a tiny sessions-like table: every neighbour
that removes one person (all their rows) or adds a new person (any multiset of up to K + 1 rows) is
truncated by the real pipeline, and the largest change of the measured query vector (L2 in noise units
for Gaussian ResidualPlanner, L1 over the Laplace scale for HDMM) gives the privacy loss a person can
cause; the ledger must charge exactly that.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import privcube
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError
from privcube.mechanisms import get_mechanism
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.unit import PrivacyUnit
from privcube.storage.contribution import open_with_id, truncate_per_id
from privcube.core.workload import parse_workload

DOMAIN = {"device": 2, "hour": 3}
K = 2
KEY = "0123456789abcdef"


def _sessions() -> pd.DataFrame:
    """Five people with 1, 2, 3, 4 and 1 sessions (two of them above K)."""
    rows = [(7, 0, 0), (8, 1, 2), (8, 1, 2), (9, 0, 1), (9, 1, 1), (9, 0, 2),
            (10, 1, 0), (10, 1, 1), (10, 0, 0), (10, 1, 2), (11, 0, 2)]
    return pd.DataFrame(rows, columns=["user", "device", "hour"])


def _truncated_counts(df: pd.DataFrame, key: str = KEY) -> np.ndarray:
    """The (device, hour) histogram of ``df`` after the pipeline's truncation to K rows per user."""
    table = truncate_per_id(open_with_id(None, DOMAIN, "user", frame=df), K, key)
    codes = table.to_pandas()
    hist = np.zeros((2, 3))
    np.add.at(hist, (codes["device"].to_numpy(), codes["hour"].to_numpy()), 1)
    return hist


def _neighbours(df: pd.DataFrame) -> list[pd.DataFrame]:
    """Remove any one person; or add a new person with any multiset of 1..K+1 rows."""
    out = [df[df["user"] != u] for u in df["user"].unique()]
    cells = list(itertools.product(range(2), range(3)))
    for r in range(1, K + 2):
        for combo in itertools.combinations_with_replacement(cells, r):
            extra = pd.DataFrame([(99, d, h) for d, h in combo], columns=df.columns)
            out.append(pd.concat([df, extra], ignore_index=True))
    return out


def test_truncation_keeps_at_most_k_rows_per_person_independently_of_others() -> None:
    df = _sessions()
    table = open_with_id(None, DOMAIN, "user", frame=df)
    kept = truncate_per_id(table, K, KEY).to_pandas()
    assert len(kept) == 1 + 2 + 2 + 2 + 1
    # the kept rows of a person do not depend on anyone else: truncate each person alone and compare
    per_person = pd.concat([truncate_per_id(open_with_id(None, DOMAIN, "user", frame=df[df["user"] == u]), K,
                                            KEY).to_pandas() for u in df["user"].unique()])
    key_cols = ["device", "hour"]
    assert sorted(map(tuple, kept[key_cols].to_numpy())) == sorted(map(tuple, per_person[key_cols].to_numpy()))
    # the choice among person 10's four rows depends on the secret key: some key keeps another subset
    subsets = {tuple(sorted(map(tuple, truncate_per_id(open_with_id(None, DOMAIN, "user", frame=df[df["user"] == 10]),
                                                       K, f"{i:016d}").to_pandas()[key_cols].to_numpy())))
               for i in range(12)}
    assert len(subsets) > 1


def test_brute_force_neighbours_match_the_residual_planner_charge(tmp_path: Path) -> None:
    df = _sessions()
    job = {"domain": dict(DOMAIN), "mechanism": "residual-planner", "workload": [{"kway": 2}, {"kway": 1}],
           "privacy": {"rho": 0.5}, "cluster": "threads", "privacy_unit": {"id": "user", "max_rows": K}}
    res = privcube.run(job, out=tmp_path / "r", data=df, seed=3, quiet=True)
    charged = res.ledger["spent"]["rho"]
    # the noise scales the mechanism used (row-level budget rho / K^2)
    dom = Domain.from_mapping(DOMAIN)
    wl = parse_workload(job["workload"], dom)
    rp = get_mechanism("residual-planner")({}).optimize(wl, PrivacyUnit("user", K).row_budget(
        PrivacyBudget.from_rho(0.5)))

    def measured(hist: np.ndarray) -> np.ndarray:
        """Each residual release in noise units: the centred marginal over tau, divided by sigma_tau."""
        parts = []
        for tau, s2 in rp.sigma2.items():
            axes = tuple(i for i, a in enumerate(DOMAIN) if a not in tau)
            m = hist.sum(axis=axes) if axes else hist
            for ax in range(m.ndim):  # orthogonal projection onto the residual space of tau
                m = m - m.mean(axis=ax, keepdims=True)
            parts.append(m.ravel() / np.sqrt(s2))
        return np.concatenate(parts)

    base = measured(_truncated_counts(df))
    losses = [0.5 * float(np.sum((measured(_truncated_counts(n)) - base) ** 2)) for n in _neighbours(df)]
    assert max(losses) == pytest.approx(charged, rel=1e-9)
    assert charged == pytest.approx(0.5, rel=1e-9)
    # without truncation the person with four rows alone would cost more than the charge
    assert res.ledger["charges"][0]["row_level_rho"] == pytest.approx(0.5 / K**2)


def test_brute_force_neighbours_match_the_hdmm_laplace_charge(tmp_path: Path) -> None:
    df = _sessions()
    job = {"domain": dict(DOMAIN), "mechanism": "hdmm", "workload": [{"kway": 2}, {"kway": 1}],
           "privacy": {"epsilon": 1.0}, "cluster": "threads", "privacy_unit": {"id": "user", "max_rows": K},
           }
    res = privcube.run(job, out=tmp_path / "h", data=df, seed=3, quiet=True)
    charged = res.ledger["spent"]["epsilon"]
    mech = get_mechanism("hdmm")({})
    wl = parse_workload(job["workload"], Domain.from_mapping(DOMAIN))
    row_budget = PrivacyUnit("user", K).row_budget(PrivacyBudget.pure_epsilon(1.0))
    _, strat, _, kind = mech._cached_select(wl, row_budget)
    scale = mech.unit_scale(row_budget)[2] * strat.sensitivity(1)  # the Laplace scale b of every row of A x
    assert kind == "laplace"
    base = strat.measure(_truncated_counts(df).ravel())
    losses = [float(np.sum(np.abs(strat.measure(_truncated_counts(n).ravel()) - base))) / scale
              for n in _neighbours(df)]
    assert max(losses) == pytest.approx(charged, rel=1e-9)
    assert charged == pytest.approx(1.0)


@pytest.mark.parametrize("mech, privacy", [("querysmasher", {"rho": 0.5}), ("eigen-design", {"epsilon": 1.0}),
                                           ("aim-grem", {"rho": 0.5})])
def test_every_mechanism_is_charged_per_person(tmp_path: Path, mech: str, privacy: dict) -> None:
    job = {"domain": dict(DOMAIN), "mechanism": mech, "workload": [{"kway": 2}], "privacy": privacy,
           "cluster": "threads", "privacy_unit": {"id": "user", "max_rows": 3}}
    res = privcube.run(job, out=tmp_path / mech, data=_sessions(), seed=1, quiet=True)
    ledger = json.loads((res.out_dir / "ledger.json").read_text())
    report = json.loads((res.out_dir / "report.json").read_text())
    assert ledger["privacy_unit"]["id"] == "user" and ledger["privacy_unit"]["max_rows"] == 3
    assert report["privacy_unit"] == ledger["privacy_unit"]
    for c in ledger["charges"]:
        if "row_level_rho" in c:
            assert c["rho"] == pytest.approx(9 * c["row_level_rho"], rel=1e-12)
        else:
            assert c["epsilon"] == pytest.approx(3 * c["row_level_epsilon"], rel=1e-12)
    assert ledger["spent"]["rho"] <= ledger["budget"]["rho"] * (1 + 1e-9)


def test_csv_and_frame_inputs_truncate_alike(tmp_path: Path) -> None:
    df = _sessions()
    df.to_csv(tmp_path / "s.csv", index=False)
    job = {"domain": dict(DOMAIN), "mechanism": "residual-planner", "workload": [{"kway": 2}],
           "privacy": {"rho": 0.5}, "cluster": "threads", "privacy_unit": {"id": "user", "max_rows": K}}
    a = privcube.run(job, out=tmp_path / "a", data=df, seed=5, quiet=True)
    b = privcube.run(job, out=tmp_path / "b", data=tmp_path / "s.csv", seed=5, quiet=True)
    pd.testing.assert_frame_equal(a.marginal("device", "hour"), b.marginal("device", "hour"))


def test_bad_privacy_units_are_one_line_without_values(tmp_path: Path) -> None:
    base = {"domain": dict(DOMAIN), "mechanism": "residual-planner", "workload": [{"kway": 1}],
            "privacy": {"rho": 0.5}, "cluster": "threads"}
    for unit, match in [({"id": "user", "max_rows": 0}, "max_rows must be a positive integer"),
                        ({"id": "", "max_rows": 2}, "privacy_unit.id must name"),
                        ({"id": "user", "max_rows": 2, "cap": 1}, "unknown key"),
                        ("user", "expected {id: COLUMN, max_rows: K}")]:
        with pytest.raises(ConfigError, match=match):
            privcube.plan({**base, "privacy_unit": unit})
    with pytest.raises(ConfigError, match="calibration: analytic"):
        privcube.plan({**base, "mechanism": {"name": "hdmm", "calibration": "analytic"},
                       "privacy": {"epsilon": 1, "delta": 1e-9}, "privacy_unit": {"id": "user", "max_rows": 2}})
    with pytest.raises(ConfigError, match="neighbours: substitution"):
        privcube.plan({**base, "mechanism": {"name": "residual-planner", "neighbours": "substitution"},
                       "privacy_unit": {"id": "user", "max_rows": 2}})
    with pytest.raises(ConfigError, match="not supported by mechanism 'relational'"):
        privcube.run({"mechanism": {"name": "relational"}, "privacy_unit": {"id": "u", "max_rows": 2}},
                     out=tmp_path / "rel")
    df = _sessions()
    with pytest.raises(DataError, match="privacy_unit.id column 'person' is missing"):
        privcube.run({**base, "privacy_unit": {"id": "person", "max_rows": 2}}, out=tmp_path / "x", data=df,
                     quiet=True)
    with pytest.raises(DataError, match="also an attribute"):
        privcube.run({**base, "privacy_unit": {"id": "hour", "max_rows": 2}}, out=tmp_path / "y", data=df,
                     quiet=True)
    secret = df.astype({"user": float})
    secret.loc[0, "user"] = np.nan
    secret.loc[1, "device"] = 1
    with pytest.raises(DataError) as e:
        privcube.run({**base, "privacy_unit": {"id": "user", "max_rows": 2}}, out=tmp_path / "z", data=secret,
                     quiet=True)
    assert "has missing values" in str(e.value) and "\n" not in str(e.value)
    for name in ("x", "y", "z"):
        assert not (tmp_path / name).exists()


def test_plan_states_the_unit_and_person_level_budget() -> None:
    p = privcube.plan({"domain": dict(DOMAIN), "mechanism": "residual-planner", "workload": [{"kway": 1}],
                       "privacy": {"rho": 0.5}, "privacy_unit": {"id": "user", "max_rows": 4}})
    assert p.privacy["rho"] == pytest.approx(0.5 / 16)
    assert p.privacy["person_level"]["rho"] == 0.5 and p.privacy["privacy_unit"]["max_rows"] == 4


def test_local_cluster_shuffle_truncates_like_threads(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = rng.integers(1, 8, 3000)
    ids = np.repeat(np.arange(rows.size), rows)
    df = pd.DataFrame({"user": ids.astype(str), "device": rng.integers(0, 2, ids.size),
                       "hour": rng.integers(0, 3, ids.size)})
    df.to_parquet(tmp_path / "sessions.parquet")
    job = {"data": {"path": str(tmp_path / "sessions.parquet")}, "domain": dict(DOMAIN),
           "mechanism": "residual-planner", "workload": [{"kway": 2}], "privacy": {"rho": 0.5},
           "privacy_unit": {"id": "user", "max_rows": 3}}
    threads = privcube.run({**job, "cluster": "threads"}, out=tmp_path / "t", seed=2, quiet=True)
    local = privcube.run({**job, "cluster": {"type": "local", "n_workers": 2, "threads_per_worker": 1}},
                         out=tmp_path / "l", seed=2, quiet=True)
    pd.testing.assert_frame_equal(threads.marginal("device", "hour"), local.marginal("device", "hour"))
    # the noisy total is close to the truncated row count (sum of min(rows, 3)), far from the raw count
    total = float(threads.marginal("device", "hour")["estimate"].sum())
    assert abs(total - np.minimum(rows, 3).sum()) < 100 < abs(total - rows.sum())
