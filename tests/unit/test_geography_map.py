"""The geography map reader: levels per finest unit in code order, and one ConfigError line per bad map."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.errors import ConfigError
from privcube.storage.geography_map import read_geography_map

LEVELS = ["state", "county", "tract"]


def _map(tmp_path: Path, frame: pd.DataFrame, name: str = "geo.parquet") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False) if name.endswith(".csv") else frame.to_parquet(path, index=False)
    return path


GOOD = pd.DataFrame({"tract": [12, 10, 11, 13], "county": [501, 501, 503, 701], "state": [5, 5, 5, 7],
                     "name": ["a", "b", "c", "d"]})


@pytest.mark.parametrize("name", ["geo.parquet", "geo.csv"])
def test_reads_levels_in_finest_code_order(tmp_path: Path, name: str) -> None:
    out = read_geography_map(_map(tmp_path, GOOD, name), LEVELS, "tract")
    assert set(out) == set(LEVELS)
    assert out["tract"].tolist() == [10, 11, 12, 13]
    assert out["county"].tolist() == [501, 503, 501, 701] and out["state"].tolist() == [5, 5, 5, 7]
    assert all(v.dtype == np.int64 for v in out.values())


def test_only_the_named_levels(tmp_path: Path) -> None:
    out = read_geography_map(_map(tmp_path, GOOD), ["county", "tract"], "tract")
    assert set(out) == {"county", "tract"}


@pytest.mark.parametrize("frame, pattern", [
    (GOOD.drop(columns="county"),
     r"no column 'county' for level 'county'; its columns are \['tract', 'state', 'name'\]"),
    (GOOD.assign(tract=[10, 10, 11, 13]), r"tract 10 has more than one row \(1 duplicated rows\)"),
    (GOOD.assign(state=[5, -1, 5, 7]), r"column 'state' has negative codes"),
    (GOOD.assign(county=[501.0, None, 503.0, 701.0]), r"column 'county' has 1 missing codes"),
    (GOOD.assign(state=["5", "5", "5", "7"]), r"column 'state' holds object values, not integer codes"),
    (GOOD.assign(state=[5.5, 5, 5, 7]), r"column 'state' holds float64 values, not integer codes"),
    (GOOD.iloc[:0], r"has no rows"),
])
def test_bad_maps_are_one_config_error(tmp_path: Path, frame: pd.DataFrame, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as e:
        read_geography_map(_map(tmp_path, frame), LEVELS, "tract")
    assert "\n" not in str(e.value)


def test_bad_paths_and_levels(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_geography_map(tmp_path / "absent.parquet", LEVELS, "tract")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ConfigError, match="is not a readable Parquet or CSV file"):
        read_geography_map(tmp_path / "junk.parquet", LEVELS, "tract")
    path = _map(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=r"must include geography.attribute 'block'"):
        read_geography_map(path, LEVELS, "block")
    with pytest.raises(ConfigError, match="names 'county' twice"):
        read_geography_map(path, ["state", "county", "county", "tract"], "tract")
