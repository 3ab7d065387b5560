"""The census job's config (issue 35): the exact interface, and one clear line for each kind of bad input."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from privcube.census.spec import TOTAL, CensusGroup, parse_census
from privcube.core.errors import ConfigError

DOMAIN = {"tract": 6, "age": 4, "marital": 3, "sex": 2}


def _raw(tmp_path: Path) -> dict:
    (tmp_path / "domain.json").write_text(json.dumps(DOMAIN))
    return {
        "data": {"path": "persons.parquet", "domain": "domain.json"},
        "geography": {"attribute": "tract", "map": "geo-map.parquet", "levels": ["state", "county", "tract"]},
        "workload": [{"kway": 1, "by": "tract"}, {"kway": 2, "by": "county"}, {"kway": 2, "by": "state"}],
        "invariants": [{"by": "state"}],
        "structural_zeros": [{"age": [0, 1], "marital": 1}],
        "output": {"integer": True},
        "privacy": {"epsilon": 1.0, "delta": 1e-9},
    }


def test_the_issue_interface_parses(tmp_path: Path) -> None:
    spec = parse_census(_raw(tmp_path), tmp_path, need_data=False)
    assert spec.attribute == "tract" and spec.levels == ("state", "county", "tract")
    assert spec.map_path == str(tmp_path / "geo-map.parquet")
    assert spec.attributes == ("age", "marital", "sex")
    assert [g for g in spec.groups if g.level == "tract"] == [CensusGroup("tract", ("age",)),
                                                              CensusGroup("tract", ("marital",)),
                                                              CensusGroup("tract", ("sex",))]
    assert len([g for g in spec.groups if g.level == "county"]) == 3  # the 3 pairs of 3 attributes
    assert spec.invariants == ("state",) and spec.output["integer"] is True and spec.split is None
    # the zero rule: ages 0-1 with marital status 1, on the (age, marital) table only
    mask = spec.zero_mask(("age", "marital"))
    expected = np.zeros((4, 3), dtype=bool)
    expected[[0, 1], 1] = True
    assert np.array_equal(mask, expected)
    assert spec.zero_mask(("age",)) is None and spec.zero_mask(("age", "sex")) is None


def test_split_total_and_marginals(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    raw["workload"] = [{"marginals": [["sex", "age"]], "by": "county"}, {"kway": 0, "by": "tract"}]
    raw["invariants"] = ["total", {"by": "county"}]
    raw["privacy"]["levels"] = {"county": 0.25, "tract": 0.75}
    spec = parse_census(raw, tmp_path, need_data=False)
    assert spec.groups == [CensusGroup("county", ("age", "sex")), CensusGroup("tract", ())]
    assert spec.invariants == (TOTAL, "county") and spec.split == {"county": 0.25, "tract": 0.75}


@pytest.mark.parametrize("change, message", [
    (lambda r: r["workload"].append({"kway": 1, "by": "metro"}), "workload[3].by: level 'metro' does not exist"),
    (lambda r: r["workload"].append({"kway": 3, "by": "state"}), "workload[3].kway: census tables are 0-, 1- or 2-way"),
    (lambda r: r["workload"].append({"kway": 1}), "workload[3].by is missing"),
    (lambda r: r["invariants"].append({"by": "metro"}), "invariants[1].by: level 'metro' does not exist"),
    (lambda r: r["invariants"].append({"by": "state"}), "invariants[1]: by: state is listed twice"),
    (lambda r: r["geography"].update(levels=["state", "tract", "county"]), "the finest level (the last) must be"),
    (lambda r: r["geography"].update(levels=["state", "state", "tract"]), "a level is listed twice"),
    (lambda r: r["geography"].update(attribute="zip"), "geography.attribute: 'zip' is not an attribute"),
    (lambda r: r["geography"].pop("map"), "geography.map is missing"),
    (lambda r: r["structural_zeros"].append({"age": 9}), "structural_zeros[1].age: code 9 is outside"),
    (lambda r: r["structural_zeros"].append({"sex": [0, 1]}), "makes every value of 'sex' impossible"),
    (lambda r: r["structural_zeros"].append({"tract": 1}), "'tract' is not a non-geographic attribute"),
    (lambda r: r["privacy"].update(levels={"state": 0.5, "county": 0.2, "tract": 0.2}), "must sum to 1"),
    (lambda r: r["privacy"].update(levels={"state": 0.5, "county": 0.5}), "no share for level 'tract'"),
    (lambda r: r.update(privacy={"epsilon": 1.0}), "a census job measures with Gaussian noise"),
    (lambda r: r.update(mechanism="hdmm"), "is not supported for census jobs yet"),
    (lambda r: r["output"].update(bootstrap=3), "output.bootstrap: expected an integer >= 10"),
    (lambda r: r.update(synthesize=True), "unknown top-level key(s) ['synthesize'] for a census job"),
])
def test_bad_input_gets_one_line_naming_the_key(tmp_path: Path, change, message: str) -> None:
    raw = copy.deepcopy(_raw(tmp_path))
    change(raw)
    with pytest.raises(ConfigError) as err:
        parse_census(raw, tmp_path, need_data=False)
    assert message in str(err.value) and "\n" not in str(err.value)
