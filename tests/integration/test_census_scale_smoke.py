"""Smoke test of benchmarks/census_scale.py: every stage runs end to end on a tiny dataset."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "census_scale.py"


def _load():
    spec = importlib.util.spec_from_file_location("census_scale", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # about 45 s on 2 shared cores: three LocalCluster sessions and five stage processes
def test_census_scale_smoke(tmp_path, capsys):
    mod = _load()
    report = mod.main(["--rows", "20000", "--attributes", "8", "--out-dir", str(tmp_path), "--workers", "1",
                       "--memory-limit", "1GiB", "--rows-per-file", "5000", "--time-limit", "300"])
    stages = {s["stage"]: s for s in report["stages"]}
    for name in ("generate", "numpy", "marginals", "residual-planner", "aim-grem"):
        assert stages[name]["status"] == "ok", (name, stages[name])
        assert stages[name]["seconds"] > 0
    assert stages["marginals"]["note"] == "equal to numpy"  # the whole dataset fits the sample: exact check
    assert report["samples"] > 0 and 0 < report["peak"] < mod.MEMORY_BOUND
    assert all(s["peak"] > 0 for s in report["stages"])
    assert report["ok"]
    out = capsys.readouterr().out
    assert "aim-grem" in out and "peak RSS of the process tree" in out

    # --reuse keeps the dataset (no generate stage) and --stages selects
    report = mod.main(["--rows", "20000", "--attributes", "8", "--out-dir", str(tmp_path), "--workers", "1",
                       "--memory-limit", "1GiB", "--rows-per-file", "5000", "--reuse", "--stages", "marginals"])
    assert [s["stage"] for s in report["stages"]] == ["cluster start", "marginals"]
    assert report["stages"][-1]["status"] == "ok"

    # a stage over its time limit is killed and reported honestly, and the report is not ok
    report = mod.main(["--rows", "20000", "--attributes", "8", "--out-dir", str(tmp_path), "--workers", "1",
                       "--memory-limit", "1GiB", "--rows-per-file", "5000", "--reuse",
                       "--stages", "residual-planner", "--time-limit", "0.5"])
    assert report["stages"][-1]["status"] == "did not finish in 0.5s"
    assert not report["ok"]
    assert "did not finish in 0.5s" in capsys.readouterr().out
