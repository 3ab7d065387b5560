"""The census counting pass on a 2-worker LocalCluster: the same tables as pandas, files read on the workers,
a bad file one DataError line; and ``privcube generate-census`` end to end."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.graphs.census_counts import count_tables
from privcube.graphs.execution import run_context
from privcube.storage.census_counts import LevelTable, open_partitions, unit_indexes
from privcube.storage.census_geography import generate_census_geo
from privcube.storage.geography_map import read_geography_map

LEVELS = ["state", "county", "tract"]


@pytest.fixture(scope="module")
def census(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("census") / "g"
    paths = generate_census_geo(out, 30_000, seed=2, n_attributes=6, rows_per_file=4_000, states=3, counties=12,
                                tracts=90)
    geo = read_geography_map(paths["map"], LEVELS, "tract")
    unit_of, n_units, codes = unit_indexes(geo, "tract")
    return dict(paths=paths, unit_of=unit_of, n_units=n_units, codes=codes,
                sizes=Domain.load(paths["domain"]).to_dict())


def _tables(sizes: dict) -> list[LevelTable]:
    attrs = [a for a in sizes if a != "tract"]
    return ([LevelTable("tract", (a,)) for a in attrs] + [LevelTable("county", ("age", "race"))]
            + [LevelTable("state", (a, b)) for i, a in enumerate(attrs) for b in attrs[i + 1:]] + [LevelTable("state")])


def test_cluster_counts_equal_pandas(census, two_worker_client) -> None:
    files, read = open_partitions(census["paths"]["persons"], census["paths"]["domain"], list(census["sizes"]),
                                  finest="tract", finest_codes=census["codes"]["tract"])
    tables = _tables(census["sizes"])
    got = count_tables(run_context(two_worker_client), files, read, census["unit_of"], "tract", tables,
                       census["sizes"], census["n_units"], window=2)
    frame = pd.read_parquet(census["paths"]["persons"])
    frame["county"] = census["unit_of"]["county"][frame["tract"].to_numpy()]
    frame["state"] = census["unit_of"]["state"][frame["tract"].to_numpy()]
    for t in tables:
        g = frame.groupby([t.level, *t.attributes]).size()
        expected = np.zeros(got[t].shape, dtype=np.int64)
        expected[tuple(np.asarray(g.index.get_level_values(i)) for i in range(g.index.nlevels))] = g.to_numpy()
        np.testing.assert_array_equal(got[t], expected, err_msg=str(t))
    assert got[LevelTable("state")].sum() == 30_000


def test_a_unit_missing_from_the_map_is_one_line(census, two_worker_client, tmp_path: Path) -> None:
    frame = pd.read_parquet(sorted(census["paths"]["persons"].glob("*.parquet"))[0])
    frame.to_parquet(tmp_path / "a.parquet", index=False)
    frame.assign(tract=np.where(np.arange(len(frame)) < 3, 89, frame["tract"])).to_parquet(tmp_path / "b.parquet",
                                                                                            index=False)
    codes = census["codes"]["tract"][census["codes"]["tract"] != 89]  # a map that lacks tract 89
    files, read = open_partitions(tmp_path, census["paths"]["domain"], list(census["sizes"]), finest="tract",
                                  finest_codes=codes)
    with pytest.raises(DataError, match=r"^column 'tract' of file '.*b.parquet': 3 rows hold a unit that is not in "
                                        r"the geography map$"):
        count_tables(run_context(two_worker_client), files, read, census["unit_of"], "tract",
                     _tables(census["sizes"]), census["sizes"], census["n_units"], title=None)


def test_generate_census_command(main_cli, tmp_path: Path) -> None:
    r = main_cli("generate-census", str(tmp_path / "g"), "--rows", "3000", "--geography", "--states", "2",
                 "--counties", "5", "--tracts", "20", "--rows-per-file", "1000", "--attributes", "5", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "generated 3000 rows" in r.stdout and "geo-map.parquet" in r.stdout
    persons = pd.read_parquet(tmp_path / "g" / "persons")
    geo = pd.read_parquet(tmp_path / "g" / "geo-map.parquet")
    assert len(persons) == 3000 and list(persons.columns) == ["tract", "age", "sex", "race", "region", "marital_status"]
    assert len(geo) == 20 and geo["county"].nunique() == 5 and geo["state"].nunique() == 2
    r = main_cli("generate-census", str(tmp_path / "g"), "--rows", "3000", "--geography")
    assert r.returncode == 2 and "already holds" in r.stderr and "--overwrite" not in r.stdout
    r = main_cli("generate-census", str(tmp_path / "flat"), "--rows", "2500", "--rows-per-file", "1000")
    assert r.returncode == 0 and len(list((tmp_path / "flat").glob("part-*.parquet"))) == 3
    r = main_cli("generate-census", str(tmp_path / "x"), "--rows", "10", "--tracts", "5")
    assert r.returncode == 2 and r.stderr.strip() == "privcube: error: generate-census: --tracts needs --geography"
