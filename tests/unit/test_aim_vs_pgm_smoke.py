"""Pure helpers of benchmarks/aim_vs_pgm.py (no PGM environment, no data): ρ conversion, error
normalisation, PGM's null-category cut, exact counts, per-cell summaries and the results table."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.zcdp import cdp_epsilon

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "aim_vs_pgm.py"
_spec = importlib.util.spec_from_file_location("aim_vs_pgm", _PATH)
avp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(avp)


def test_rho_is_privcubes_own_conversion():
    for eps in (0.3, 1.0, 3.0, 10.0):
        rho = avp.rho_for(eps)
        assert rho == PrivacyBudget.from_epsilon_delta(eps, 1e-9).rho  # the budget ours runs with
        assert cdp_epsilon(rho, 1e-9) <= eps * (1 + 1e-9)
    assert avp.rho_for(1.0) == pytest.approx(0.01497, abs=1e-5)  # the figure quoted in PEERS.md


def test_error_is_mean_l1_over_n():
    truth = [np.array([[3.0, 1.0], [0.0, 6.0]]), np.array([5.0, 5.0])]
    est = [np.array([[2.0, 1.0], [1.0, 6.0]]), np.array([5.0, 9.0])]
    np.testing.assert_allclose(avp.l1_errors(truth, est), [2.0, 4.0])
    assert avp.mean_l1_over_n(truth, est, 10) == pytest.approx(0.3)  # mean(2, 4) / N
    with pytest.raises(ValueError):
        avp.l1_errors([np.zeros(3)], [np.zeros(4)])


def test_strip_null_drops_trailing_category_per_axis():
    arr = np.arange(3 * 4).reshape(3, 4)
    np.testing.assert_array_equal(avp.strip_null(arr, (2, 3)), arr[:2, :3])
    with pytest.raises(ValueError):
        avp.strip_null(arr, (4, 3))


def test_exact_marginal_counts():
    codes = np.array([[0, 1], [0, 1], [1, 0], [1, 2]])
    m = avp.exact_marginal(codes, (2, 3))
    np.testing.assert_array_equal(m, [[0, 2, 0], [1, 0, 1]])


def test_summary_and_table_report_dnf_and_ratios():
    def run(side, status, **kw):
        return {"dataset": "nltcs", "epsilon": 1.0, "side": side, "seed": 0, "status": status, "wall_s": 10.0,
                "peak_rss_mb": 100.0, **kw}

    results = {"runs": [run("ours", "ok", time_s=2.0, error=0.01, error_raw=200.0),
                        run("rp", "ok", time_s=1.0, error=0.02, error_raw=400.0),
                        run("pgm", "ok", time_s=8.0, error=0.02, error_raw=400.0)],
               "order": [["nltcs", 1.0]], "meta": {"threads": 2}}
    row = avp.cell_rows(results)[0]
    assert row["time_ratio_ours_pgm"] == pytest.approx(0.25)
    assert row["error_ratio_ours_pgm"] == pytest.approx(0.5)
    assert "NON-PRIVATE" in avp.format_table(results)
    results["runs"][2] = run("pgm", "dnf", reason="timeout", wall_s=900.0)
    row = avp.cell_rows(results)[0]
    assert row["pgm_status"] == "dnf" and row["error_ratio_ours_pgm"] is None
    assert row["time_ratio_ours_pgm_upper"] == pytest.approx(2.0 / 900.0)
    assert "DNF in 900s" in avp.format_table(results)
