"""The configuration rule of benchmarks/synth_peers.py (pure; no peers, no data): quality first, ties by the
held-out seed-to-seed spread, a tie won by the lower median held-out core time."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "synth_peers.py"
_spec = importlib.util.spec_from_file_location("synth_peers", _PATH)
sp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sp)


def _runs(scores2: list[float], scores3: list[float], cores: list[float]) -> list[dict]:
    return [{"tvd": [0.0, a, b], "core_s": c} for a, b, c in zip(scores2, scores3, cores)]


def test_held_out_seeds_are_not_timed_seeds():
    assert sp.HOLDOUT_SEEDS == (100, 101, 102)
    assert not set(sp.HOLDOUT_SEEDS) & {0, 1, 2, 3, 4}


def test_a_tie_within_two_percent_goes_to_the_faster():
    held = {"slow": _runs([0.010] * 3, [0.020] * 3, [2.0, 2.1, 2.2]),
            "fast": _runs([0.0102] * 3, [0.0203] * 3, [0.5, 0.4, 0.6])}  # 1.7 % worse: tied
    choice, summary = sp.decide(held)
    assert choice == "fast" and summary["fast"]["tied"] and summary["slow"]["score"] == pytest.approx(0.015)
    assert summary["fast"]["core_median"] == pytest.approx(0.5)


def test_a_worse_configuration_is_never_chosen_for_speed():
    held = {"good": _runs([0.010] * 3, [0.020] * 3, [5.0] * 3),
            "bad": _runs([0.011] * 3, [0.021] * 3, [0.1] * 3)}  # 6.7 % worse, no spread: not tied
    choice, summary = sp.decide(held)
    assert choice == "good" and not summary["bad"]["tied"]


def test_the_seed_to_seed_spread_widens_the_tie():
    # the best's scores spread (SE 0.00098 on a mean of 0.015, 6.5 %): a 4 % worse candidate is tied
    held = {"noisy": _runs([0.0117, 0.0100, 0.0083], [0.0217, 0.0200, 0.0183], [3.0] * 3),
            "other": _runs([0.0106] * 3, [0.0206] * 3, [1.0] * 3)}
    choice, summary = sp.decide(held)
    assert summary["noisy"]["se"] == pytest.approx(0.0017 / 3 ** 0.5, rel=1e-6)
    assert summary["other"]["tied"] and choice == "other"


def test_the_large_domain_table_is_generated_once_with_its_public_domain(tmp_path: Path) -> None:
    """The generated table (issue 32) is written on first use with the published domain and kept: a second call
    reads the same file (no second draw)."""
    import json

    from privcube.storage.large_domain import LARGE_DOMAIN

    csv, dom = sp.large_domain_files(tmp_path, seed=7, n_rows=300)
    assert json.loads(dom.read_text()) == LARGE_DOMAIN
    lines = csv.read_text().splitlines()
    assert lines[0].split(",") == list(LARGE_DOMAIN) and len(lines) == 301
    before = csv.stat().st_mtime_ns
    assert sp.large_domain_files(tmp_path, seed=7, n_rows=300) == (csv, dom) and csv.stat().st_mtime_ns == before
