"""A census run end to end (issue 35): geography levels that add up exactly, invariants exact, structural zeros
zero, whole non-negative counts, intervals, one charge per level, bad input in one line with nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube import api
from privcube.core.errors import ConfigError, DataError

SIZES = {"age": 4, "marital": 3, "sex": 2}


def write_inputs(folder: Path, *, rows: int = 6000, seed: int = 3) -> dict:
    """2 states, 5 counties, 20 tracts (codes not 0..n-1 for states/counties), persons with unit-varying
    attributes and no person in the impossible cells (age 0-1 and marital 1)."""
    rng = np.random.default_rng(seed)
    county_of_tract = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4]) * 10 + 7
    state_of_county = {7: 1, 17: 1, 27: 5, 37: 5, 47: 5}
    geo = pd.DataFrame({"tract": np.arange(20), "county": county_of_tract,
                        "state": [state_of_county[c] for c in county_of_tract]})
    geo.to_parquet(folder / "geo-map.parquet")
    tract = rng.choice(20, rows, p=rng.dirichlet(np.full(20, 2.0)))
    shift = (tract % 4) / 4.0
    age = np.minimum((rng.random(rows) * 4 + shift).astype(int), 3)
    marital = rng.integers(0, 3, rows)
    marital[(age <= 1) & (marital == 1)] = 0
    sex = (rng.random(rows) < 0.3 + 0.4 * shift).astype(int)
    (folder / "persons").mkdir()
    pd.DataFrame({"tract": tract, "age": age, "marital": marital, "sex": sex}).to_parquet(
        folder / "persons" / "part-0.parquet")
    (folder / "domain.json").write_text(json.dumps({"tract": 20, **SIZES}))
    return {
        "data": {"path": "persons", "domain": "domain.json"},
        "geography": {"attribute": "tract", "map": "geo-map.parquet", "levels": ["state", "county", "tract"]},
        "workload": [{"kway": 1, "by": "tract"}, {"kway": 2, "by": "county"}, {"kway": 2, "by": "state"}],
        "invariants": [{"by": "state"}],
        "structural_zeros": [{"age": [0, 1], "marital": 1}],
        "output": {"integer": True, "bootstrap": 20},
        "privacy": {"epsilon": 1.0, "delta": 1e-9},
    }


def _answers(run: Path) -> tuple[dict, dict[tuple[str, tuple[str, ...]], pd.DataFrame]]:
    index = json.loads((run / "answers" / "index.json").read_text())
    frames = {(g["by"], tuple(g["attributes"])): pd.read_parquet(run / "answers" / g["file"]) for g in index["groups"]}
    return index, frames


@pytest.fixture(scope="module")
def census_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("census")
    config = write_inputs(folder)
    (folder / "job.json").write_text(json.dumps(config))
    api.run(folder / "job.json", folder / "run", seed=11, quiet=True)
    return folder, folder / "run"


def test_groups_carry_their_level_and_the_columns(census_run: tuple[Path, Path]) -> None:
    _, run = census_run
    index, frames = _answers(run)
    assert {g["by"] for g in index["groups"]} == {"state", "county", "tract"}
    tract = frames[("tract", ("age",))]
    assert list(tract.columns[:2]) == ["tract", "age"]
    for col in ("estimate", "variance", "published", "ci_low", "ci_high"):
        assert col in tract.columns
    assert len(tract) == 20 * 4 and len(frames[("county", ("age", "marital"))]) == 5 * 12
    assert set(frames[("county", ("age", "sex"))]["county"]) == {7, 17, 27, 37, 47}


def test_published_tables_add_up_exactly_and_keep_invariants_and_zeros(census_run: tuple[Path, Path]) -> None:
    folder, run = census_run
    _, frames = _answers(run)
    geo = pd.read_parquet(folder / "geo-map.parquet")
    persons = pd.read_parquet(folder / "persons")
    for f in frames.values():
        assert (f["published"] >= 0).all() and pd.api.types.is_integer_dtype(f["published"])
        assert (f["ci_low"] >= 0).all() and (f["ci_low"] <= f["ci_high"]).all()
    # 2-way tables by county add up to the state's, cell by cell, exactly
    for pair in (("age", "marital"), ("age", "sex"), ("marital", "sex")):
        county = frames[("county", pair)].merge(geo[["county", "state"]].drop_duplicates(), on="county")
        summed = county.groupby(["state", *pair])["published"].sum().reset_index()
        state = frames[("state", pair)].merge(summed, on=["state", *pair], suffixes=("", "_children"))
        assert len(state) == 2 * SIZES[pair[0]] * SIZES[pair[1]]
        assert (state["published"] == state["published_children"]).all(), pair
    # 1-way tables by tract add up to the county's table on that attribute (the first attribute of its pairs)
    tract = frames[("tract", ("age",))].merge(geo[["tract", "county"]], on="tract")
    summed = tract.groupby(["county", "age"])["published"].sum()
    county_age = frames[("county", ("age", "marital"))].groupby(["county", "age"])["published"].sum()
    assert (summed.sort_index() == county_age.sort_index()).all()
    # every tract's 1-way tables share one total; each state's total is its exact population (the invariant)
    totals = {a: frames[("tract", (a,))].groupby("tract")["published"].sum() for a in SIZES}
    assert (totals["age"] == totals["marital"]).all() and (totals["age"] == totals["sex"]).all()
    true_state = persons.merge(geo, on="tract").groupby("state").size()
    state_total = frames[("state", ("age", "sex"))].groupby("state")["published"].sum()
    assert (state_total.sort_index() == true_state.sort_index()).all()
    # the structural zero holds at every level
    for lv in ("county", "state"):
        f = frames[(lv, ("age", "marital"))]
        assert (f.loc[(f["age"] <= 1) & (f["marital"] == 1), ["published", "ci_low", "ci_high"]] == 0).all().all()


def test_one_charge_per_level_within_budget_and_invariants_stated(census_run: tuple[Path, Path]) -> None:
    _, run = census_run
    ledger = json.loads((run / "ledger.json").read_text())
    labels = [c["label"] for c in ledger["charges"]]
    assert sorted(labels) == ["residual-planner:county", "residual-planner:state", "residual-planner:tract"]
    assert ledger["spent"]["rho"] <= ledger["budget"]["rho"] * (1 + 1e-12)
    assert ledger["spent"]["rho"] >= ledger["budget"]["rho"] * 0.999  # the split spends the whole budget
    assert ledger["public_facts"]["invariants"] == ["by state"]
    report = json.loads((run / "report.json").read_text())
    assert report["postprocess"]["charged"] is False and set(report["levels"]) == {"state", "county", "tract"}
    assert abs(sum(report["split"].values()) - 1.0) < 1e-9
    assert not (run / "checkpoint").exists() and (run / ".complete").exists()


def test_seeded_runs_repeat_and_the_plan_reads_no_data(census_run: tuple[Path, Path], tmp_path: Path,
                                                       monkeypatch) -> None:
    import privcube.jobs.census as census_job

    folder, run = census_run
    monkeypatch.setattr(census_job, "WRITE_BATCH_ROWS", 50)  # the answer files written in small batches: the same
    api.run(folder / "job.json", tmp_path / "again", seed=11, quiet=True)
    assert sorted(p.name for p in (run / "answers").iterdir()) == \
        sorted(p.name for p in (tmp_path / "again" / "answers").iterdir())
    for name in sorted((run / "answers").glob("*.parquet")):
        assert pd.read_parquet(name).equals(pd.read_parquet(tmp_path / "again" / "answers" / name.name))
    raw = json.loads((folder / "job.json").read_text())
    raw["data"]["path"] = "no-such-folder"
    (folder / "plan-only.json").write_text(json.dumps(raw))
    plan = api.plan(folder / "plan-only.json").to_dict()
    levels = plan["details"]["levels"]
    assert set(levels) == {"state", "county", "tract"}
    assert all(lv["rmse"] <= lv["rmse_alone"] * (1 + 1e-9) for lv in levels.values())


@pytest.mark.parametrize("change, error, message", [
    (lambda f, r: pd.DataFrame({"tract": range(20), "county": [1] * 10 + [2] * 10,
                                "state": [1] * 15 + [2] * 5}).to_parquet(f / "geo-map.parquet"),
     ConfigError, "county 2"),
    (lambda f, r: pd.DataFrame({"tract": range(19), "county": [1] * 19, "state": [1] * 19}).to_parquet(
        f / "geo-map.parquet"), DataError, "tract"),
    (lambda f, r: r["workload"].append({"kway": 1, "by": "metro"}), ConfigError, "level 'metro' does not exist"),
    (lambda f, r: r["structural_zeros"].append({"age": 3, "sex": 1}), DataError, "structural_zeros[1]"),
])
def test_bad_input_one_line_nothing_written(tmp_path: Path, change, error: type, message: str) -> None:
    raw = write_inputs(tmp_path, rows=800)
    change(tmp_path, raw)
    with pytest.raises(error) as err:
        api.run(_as_file(tmp_path, raw), tmp_path / "run", seed=1, quiet=True)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def _as_file(folder: Path, raw: dict) -> Path:
    (folder / "job.json").write_text(json.dumps(raw))
    return folder / "job.json"


def test_the_report_page_shows_the_levels(census_run: tuple[Path, Path]) -> None:
    from privcube.report.page import render_report

    _, run = census_run
    html = render_report(run, replan=api.plan)
    assert '<section id="levels"><h2>Levels</h2>' in html and "Expected error per cell by level" in html
    assert "tract: age" in html  # groups named with their level


def test_discrete_noise_and_a_given_split(tmp_path: Path) -> None:
    """Exact discrete Gaussian noise on the integer counts (lattice accounting), the split as configured."""
    raw = write_inputs(tmp_path, rows=1500)
    raw["noise_sampler"] = "discrete"
    raw["privacy"]["levels"] = {"state": 0.2, "county": 0.3, "tract": 0.5}
    api.run(_as_file(tmp_path, raw), tmp_path / "run", seed=2, quiet=True)
    ledger = json.loads((tmp_path / "run" / "ledger.json").read_text())
    assert ledger["noise"]["sampler"] == "discrete"
    rho = {c["label"].split(":")[1]: c["rho"] for c in ledger["charges"]}
    total = ledger["budget"]["rho"]
    assert {k: round(v / total, 6) for k, v in rho.items()} == {"state": 0.2, "county": 0.3, "tract": 0.5}
    _, frames = _answers(tmp_path / "run")
    assert all((f["published"] >= 0).all() for f in frames.values())


def test_a_crash_after_measuring_resumes_without_spending_twice(tmp_path: Path, monkeypatch) -> None:
    """The measured residuals are committed before the fit: a run that dies in the fit resumes from them (the
    same charges, once; the same answers as an uninterrupted run with that seed)."""
    import privcube.census.release as release_module

    config = _as_file(tmp_path, write_inputs(tmp_path, rows=1500))
    real = release_module.fit_residuals

    def crash(*args, **kwargs):
        raise RuntimeError("killed in the fit")

    monkeypatch.setattr(release_module, "fit_residuals", crash)
    with pytest.raises(RuntimeError, match="killed in the fit"):
        api.run(config, tmp_path / "run", seed=4, quiet=True)
    assert (tmp_path / "run" / "checkpoint").exists() and not (tmp_path / "run" / ".complete").exists()
    monkeypatch.setattr(release_module, "fit_residuals", real)
    api.run(config, tmp_path / "run", seed=4, resume=True, quiet=True)
    api.run(config, tmp_path / "straight", seed=4, quiet=True)
    resumed, straight = (json.loads((tmp_path / r / "ledger.json").read_text()) for r in ("run", "straight"))
    assert resumed["charges"] == straight["charges"] and resumed["spent"] == straight["spent"]
    for name in sorted((tmp_path / "straight" / "answers").glob("*.parquet")):
        assert pd.read_parquet(name).equals(pd.read_parquet(tmp_path / "run" / "answers" / name.name))
