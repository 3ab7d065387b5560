"""Census counting kernel: per-level tables against pandas groupby, slices that add up across partitions, the
file reader through the input format, and one DataError line (column and count, no value) for bad rows."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.graphs.census_counts import count_tables
from privcube.storage.census_counts import (LevelTable, add_slices, count_partition, empty_totals, finest_index,
                                            open_partitions, unit_indexes)
from privcube.storage.census_geography import generate_census_geo
from privcube.storage.geography_map import read_geography_map

LEVELS = ["state", "county", "tract"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("counts") / "g"
    paths = generate_census_geo(out, 40_000, seed=11, n_attributes=8, rows_per_file=6_000, states=4, counties=15,
                                tracts=120, workers=1)
    geo = read_geography_map(paths["map"], LEVELS, "tract")
    unit_of, n_units, codes = unit_indexes(geo, "tract")
    domain = Domain.load(paths["domain"])
    frame = pd.concat([pd.read_parquet(f) for f in sorted(paths["persons"].glob("*.parquet"))], ignore_index=True)
    geo_frame = pd.read_parquet(paths["map"]).set_index("tract")
    frame["county"] = geo_frame["county"].reindex(frame["tract"]).to_numpy()
    frame["state"] = geo_frame["state"].reindex(frame["tract"]).to_numpy()
    attrs = [a for a in domain if a != "tract"]
    tables = ([LevelTable("tract", (a,)) for a in attrs] + [LevelTable("tract")]
              + [LevelTable("county", p) for p in [("age", "sex"), ("race", "education"), ("region", "age")]]
              + [LevelTable("county", ("marital_status",)), LevelTable("state")]
              + [LevelTable("state", p) for p in itertools.combinations(attrs, 2)])
    return dict(paths=paths, unit_of=unit_of, n_units=n_units, codes=codes, sizes=domain.to_dict(), frame=frame,
                tables=tables)


def _expected(frame: pd.DataFrame, table: LevelTable, codes: np.ndarray, sizes: dict) -> np.ndarray:
    """The table by pandas groupby on the level's codes, laid out (unit in code order, *attribute codes)."""
    out = np.zeros((len(codes), *(sizes[a] for a in table.attributes)), dtype=np.int64)
    g = frame.groupby([table.level, *table.attributes]).size()
    keys = [np.asarray(g.index.get_level_values(i)) for i in range(g.index.nlevels)]
    out[(np.searchsorted(codes, keys[0]), *keys[1:])] = g.to_numpy()
    return out


def test_unit_indexes_of_a_small_map() -> None:
    geo = {"tract": np.array([0, 1, 2, 3]), "county": np.array([1003, 1001, 1003, 2001]),
           "state": np.array([1, 1, 1, 2])}
    unit_of, n_units, codes = unit_indexes(geo, "tract")
    assert n_units == {"tract": 4, "county": 3, "state": 2}
    assert unit_of["county"].tolist() == [1, 0, 1, 2] and unit_of["state"].tolist() == [0, 0, 0, 1]
    assert unit_of["tract"].tolist() == [0, 1, 2, 3] and codes["county"].tolist() == [1001, 1003, 2001]


def test_whole_table_matches_pandas_groupby(data) -> None:
    frame = data["frame"]
    columns = {c: frame[c].to_numpy() for c in frame.columns if c not in ("county", "state")}
    got = count_partition(columns, data["unit_of"], "tract", data["tables"], data["sizes"], data["n_units"])
    assert set(got) == set(data["tables"])
    for table in data["tables"]:
        first, counts = got[table]
        assert first == 0 and counts.dtype == np.int64
        expected = _expected(frame.assign(tract=frame["tract"].astype(np.int64)), table,
                             data["codes"][table.level], data["sizes"])
        np.testing.assert_array_equal(counts, expected[: len(counts)], err_msg=str(table))
        assert expected[len(counts):].sum() == 0


def test_slices_of_the_partitions_add_up(data) -> None:
    totals = empty_totals(data["tables"], data["sizes"], data["n_units"])
    files = sorted(data["paths"]["persons"].glob("*.parquet"))
    narrow = 0
    for f in files:
        part = pd.read_parquet(f)
        got = count_partition({c: part[c].to_numpy() for c in part.columns}, data["unit_of"], "tract",
                              data["tables"], data["sizes"], data["n_units"])
        first, counts = got[LevelTable("tract", ("age",))]
        assert first == part["tract"].min() and len(counts) == part["tract"].max() - part["tract"].min() + 1
        narrow += len(counts) < data["n_units"]["tract"] / 2
        add_slices(totals, got)
    assert narrow == len(files)  # data grouped by geography: each file holds a small range of tracts
    for table in data["tables"]:
        np.testing.assert_array_equal(totals[table], _expected(data["frame"], table, data["codes"][table.level],
                                                               data["sizes"]), err_msg=str(table))
    assert totals[LevelTable("state")].sum() == len(data["frame"])


def test_count_tables_through_the_reader_and_a_context_map(data) -> None:
    files, read = open_partitions(data["paths"]["persons"], data["paths"]["domain"], list(data["sizes"]),
                                  finest="tract", finest_codes=data["codes"]["tract"])
    assert len(files) == 7
    calls = []

    def counting_map(fn, items, **kw):  # noqa: ANN001, ANN003, ANN202 - a context map that records its calls
        calls.append(len(items))
        return [fn(x) for x in items]

    ctx = RunContext(map=counting_map)
    got = count_tables(ctx, files, read, data["unit_of"], "tract", data["tables"], data["sizes"], data["n_units"],
                       title=None, window=3)
    assert calls == [3, 3, 1]  # a few partitions at a time, accumulated between calls
    for table in data["tables"]:
        np.testing.assert_array_equal(got[table], _expected(data["frame"], table, data["codes"][table.level],
                                                            data["sizes"]), err_msg=str(table))


def test_reader_maps_codes_to_map_positions(tmp_path: Path) -> None:
    frame = pd.DataFrame({"tract": np.array([7, 3, 7, 5], dtype=np.int64), "a": np.array([0, 1, 1, 0], np.uint8)})
    frame.to_parquet(tmp_path / "p.parquet", index=False)
    files, read = open_partitions(tmp_path / "p.parquet", {"tract": 8, "a": 2}, ["tract", "a"], finest="tract",
                                  finest_codes=np.array([3, 5, 7]))
    cols = read(files[0])
    assert cols["tract"].tolist() == [2, 0, 2, 1] and cols["a"].tolist() == [0, 1, 1, 0]
    with pytest.raises(DataError, match=r"column 'b' is missing"):
        open_partitions(tmp_path / "p.parquet", {"tract": 8, "b": 2}, ["tract", "b"])


def test_bad_rows_are_one_line_with_column_and_count() -> None:
    codes = np.array([10, 20, 30, 40], dtype=np.int64)
    with pytest.raises(DataError, match=r"column 'tract' of the data: 2 rows hold a unit that is not in the "
                                        r"geography map") as e:
        finest_index(np.array([10, 25, 40, 99]), codes, "tract")
    assert "25" not in str(e.value) and "99" not in str(e.value)
    with pytest.raises(DataError, match="column 'tract' of the data: 1 rows"):
        finest_index(np.array([0, 1, 4]), np.arange(4), "tract")
    unit_of = {"tract": np.arange(4), "county": np.array([0, 0, 1, 1])}
    cols = {"tract": np.array([0, 1, 3, 2]), "x": np.array([0, 2, 3, 9], dtype=np.uint8)}
    with pytest.raises(DataError, match=r"^column 'x': 2 rows hold a code outside the domain \[0, 3\)$"):
        count_partition(cols, unit_of, "tract", [LevelTable("county", ("x",))], {"x": 3}, {"tract": 4, "county": 2})
    cols = {"tract": np.array([0, -1, 3, 2]), "x": np.array([0, 1, 1, 2], dtype=np.uint8)}
    with pytest.raises(DataError, match=r"^column 'tract': 1 rows hold a code outside the domain \[0, 4\)$"):
        count_partition(cols, unit_of, "tract", [LevelTable("county", ("x",))], {"x": 3}, {"tract": 4, "county": 2})


def test_an_empty_partition_counts_nothing() -> None:
    unit_of = {"tract": np.arange(4), "county": np.array([0, 0, 1, 1])}
    cols = {"tract": np.zeros(0, np.int64), "x": np.zeros(0, np.uint8)}
    tables = [LevelTable("county", ("x",)), LevelTable("tract")]
    got = count_partition(cols, unit_of, "tract", tables, {"x": 3}, {"tract": 4, "county": 2})
    totals = empty_totals(tables, {"x": 3}, {"tract": 4, "county": 2})
    add_slices(totals, got)
    assert all(t.sum() == 0 for t in totals.values()) and totals[tables[0]].shape == (2, 3)


def test_rows_in_any_order_count_the_same(data) -> None:
    """Shuffled rows (no runs of units: the composite-key path at every level) give pandas' tables too."""
    frame = data["frame"].sample(frac=1.0, random_state=3).reset_index(drop=True)
    columns = {c: frame[c].to_numpy() for c in frame.columns if c not in ("county", "state")}
    got = count_partition(columns, data["unit_of"], "tract", data["tables"], data["sizes"], data["n_units"])
    for table in data["tables"]:
        first, counts = got[table]
        expected = _expected(frame, table, data["codes"][table.level], data["sizes"])
        np.testing.assert_array_equal(counts, expected[first:first + len(counts)], err_msg=str(table))


def test_three_attribute_tables_by_runs_and_by_key() -> None:
    """A 3-way table per unit (16-bit keys on runs, 64-bit composite keys otherwise) against pandas."""
    rng = np.random.default_rng(0)
    n = 5_000
    frame = pd.DataFrame({"tract": np.sort(rng.integers(0, 6, n)), "a": rng.integers(0, 40, n).astype(np.uint8),
                          "b": rng.integers(0, 30, n).astype(np.uint8), "c": rng.integers(0, 50, n).astype(np.uint8)})
    unit_of = {"tract": np.arange(6), "county": np.array([0, 0, 1, 1, 1, 2])}
    sizes, n_units = {"a": 40, "b": 30, "c": 50}, {"tract": 6, "county": 3}
    tables = [LevelTable("county", ("a", "b", "c")), LevelTable("tract", ("c", "a", "b")), LevelTable("county")]
    frame["county"] = unit_of["county"][frame["tract"]]
    for order in (frame, frame.sample(frac=1.0, random_state=1)):
        got = count_partition({c: order[c].to_numpy() for c in ("tract", "a", "b", "c")}, unit_of, "tract", tables,
                              sizes, n_units)
        for t in tables:
            expected = _expected(frame, t, np.arange(n_units[t.level]), sizes)
            np.testing.assert_array_equal(got[t][1], expected[got[t][0]:], err_msg=str(t))


def test_reader_checks_codes_like_the_encoder(tmp_path: Path) -> None:
    """Integer codes inside the domain pass as they are; a code outside it, or a float column, goes through the
    ingest encoder: its one-line error (column, file, rule; no value), or its encoding."""
    good = pd.DataFrame({"tract": np.array([0, 1, 1], np.int64), "a": np.array([0, 2, 1], np.int16)})
    good.to_parquet(tmp_path / "good.parquet", index=False)
    good.assign(a=np.array([0, 3, 1], np.int16)).to_parquet(tmp_path / "bad.parquet", index=False)
    good.assign(a=[0.0, 2.0, 1.0]).to_parquet(tmp_path / "float.parquet", index=False)
    files, read = open_partitions(tmp_path / "good.parquet", {"tract": 2, "a": 3}, ["tract", "a"])
    cols = read(files[0])
    assert cols["a"].tolist() == [0, 2, 1] and cols["a"].dtype == np.uint8
    assert read(str(tmp_path / "float.parquet"))["a"].tolist() == [0, 2, 1]
    with pytest.raises(DataError, match=r"^column 'a' of file '.*bad.parquet'.*: a value is outside the domain "
                                        r"\[0, 3\)") as e:
        read(str(tmp_path / "bad.parquet"))
    assert "\n" not in str(e.value)
