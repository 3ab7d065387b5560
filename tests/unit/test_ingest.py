"""Encoding kernel, lazy Parquet/CSV ingest, bad-input errors, projection, distinct compression."""
from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import DataError
from privcube.storage.distinct import compress, compress_records
from privcube.storage.ingest import encode_frame, open_table, validate
from privcube.storage.schema import load_schema

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "numeric", "bins": [0, 18, 25, 35, 50, 65, 120], "missing": "code"},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "created", "type": "date", "bins": ["2010-01-01", "2012-01-01", "2014-07-01"]},
        {"name": "workclass", "type": "integer", "size": 9},
    ]
}


@pytest.fixture(autouse=True)
def _sync_scheduler():
    """Run dask synchronously: small data, shared cores."""
    with dask.config.set(scheduler="synchronous"):
        yield


def _raw(n: int = 200, seed: int = 0) -> pd.DataFrame:
    """Raw frame matching SCHEMA, columns deliberately in a different order plus an extra column."""
    rng = np.random.default_rng(seed)
    age = rng.uniform(0, 119.9, n)
    age[rng.random(n) < 0.1] = np.nan
    days = rng.integers(0, (pd.Timestamp("2014-06-30") - pd.Timestamp("2010-01-01")).days, n)
    return pd.DataFrame({
        "extra": rng.random(n),
        "workclass": rng.integers(0, 9, n),
        "created": pd.Timestamp("2010-01-01") + pd.to_timedelta(days, unit="D"),
        "sex": rng.choice(["F", "M"], n),
        "age": age,
    })


def _expected(df: pd.DataFrame) -> pd.DataFrame:
    """Independent pandas encoding of _raw data (pd.cut, explicit maps)."""
    age = pd.cut(df["age"], [0, 18, 25, 35, 50, 65, 120], right=False, labels=False)
    created = pd.cut(df["created"], pd.to_datetime(["2010-01-01", "2012-01-01", "2014-07-01"]), right=False, labels=False)
    return pd.DataFrame({
        "age": age.fillna(6).astype(int),
        "sex": df["sex"].map({"F": 0, "M": 1}),
        "created": created.astype(int),
        "workclass": df["workclass"].astype(int),
    })


def test_encode_frame_matches_pandas() -> None:
    """All four kinds, incl. missing: code, equal an independent pandas encoding, in schema order."""
    df = _raw()
    enc = encode_frame(df, load_schema(SCHEMA))
    assert list(enc.columns) == ["age", "sex", "created", "workclass"]
    assert all(dt == np.uint8 for dt in enc.dtypes)
    exp = _expected(df)
    for c in exp.columns:
        np.testing.assert_array_equal(enc[c].to_numpy().astype(int), exp[c].to_numpy(), err_msg=c)
    assert (enc["age"] == 6).sum() == df["age"].isna().sum() > 0


def test_text_dates_and_numbers_from_csv_style_input() -> None:
    """With parse_text, numbers and ISO dates written as text encode like typed values."""
    df = _raw(50)
    text = df.astype({"workclass": str, "age": str}).assign(created=df["created"].dt.strftime("%Y-%m-%d"))
    text.loc[text["age"] == "nan", "age"] = None
    enc = encode_frame(text, SCHEMA, parse_text=True)
    pd.testing.assert_frame_equal(enc, encode_frame(df, SCHEMA))


def test_wide_domain_uses_uint16_and_clip() -> None:
    """Codes use the smallest unsigned dtype; clip maps out-of-range numbers to end bins."""
    s = {"attributes": [{"name": "x", "type": "integer", "size": 300},
                        {"name": "y", "type": "numeric", "bins": [0, 10, 20], "clip": True}]}
    enc = encode_frame(pd.DataFrame({"x": [0, 299], "y": [-5.0, 25.0]}), s)
    assert enc["x"].dtype == np.uint16 and enc["x"].tolist() == [0, 299]
    assert enc["y"].tolist() == [0, 1]


@pytest.mark.parametrize(
    "column, values, pattern, secret",
    [
        ("age", [97.0, 130.0], r"column 'age', row 1: a value is outside the domain \[0, 120\)", "130"),
        ("age", [-1.0, 3.0], r"column 'age', row 0: a value is outside the domain \[0, 120\)", "-1"),
        ("sex", ["F", "X"], r"column 'sex', row 1: a value is not one of the categories \['F', 'M'\]", "'X'"),
        ("sex", ["F", None], r"column 'sex', row 1: a value is missing", "None"),
        ("workclass", [1, 9], r"column 'workclass', row 1: a value is outside the domain \[0, 9\)", "9 "),
        ("workclass", [1, -2], r"column 'workclass', row 1: a value is outside the domain \[0, 9\)", "-2"),
        ("workclass", [1.0, np.nan], r"column 'workclass', row 1: a value is missing", "nan"),
        ("workclass", [1.0, 2.5], r"column 'workclass', row 1: a value is not a whole number", "2.5"),
        ("workclass", ["1", "abcqq"], r"column 'workclass', row 0: holds text where integer codes are expected", "abcqq"),
        ("age", ["tenzz", "20"], r"column 'age', row 0: holds text where numbers are expected", "tenzz"),
        ("created", ["2011-05-05", "someday"], r"column 'created', row 1: a value is not a date", "someday"),
        ("created", [17, 2], r"column 'created', row 0: column dtype int64 cannot hold dates", "17"),
        ("created", ["2009-12-31", "2011-01-01"], r"column 'created', row 0: a value is outside the domain", "2009-12-31"),
    ],
)
def test_bad_values_raise_data_error(column: str, values: list, pattern: str, secret: str) -> None:
    """Each bad input raises DataError naming the column, the row and the rule broken, never the value."""
    df = _raw(2)
    df[column] = pd.Series(values, dtype=object if isinstance(values[0], str) or None in values else None)
    with pytest.raises(DataError, match=pattern) as e:
        encode_frame(df, SCHEMA, positional=True)
    assert secret not in str(e.value)


def test_missing_column_named() -> None:
    """A missing column is reported by name."""
    with pytest.raises(DataError, match=r"column 'sex' is missing"):
        encode_frame(_raw(3).drop(columns="sex"), SCHEMA)


def _write_parts(df: pd.DataFrame, folder: Path, n: int) -> None:
    """Split df into n Parquet files."""
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(df)), n)):
        df.iloc[part].to_parquet(folder / f"part-{i}.parquet", index=False)


def test_parquet_directory_equals_pandas(tmp_path: Path) -> None:
    """A directory of several Parquet files encodes to the pandas encoding of the whole table."""
    df = _raw(300)
    _write_parts(df, tmp_path / "d", 3)
    t = open_table(tmp_path / "d", SCHEMA)
    assert t.npartitions == 3 and t.domain == load_schema(SCHEMA).domain
    got = t.to_pandas()
    exp = _expected(df)
    for c in exp.columns:
        np.testing.assert_array_equal(got[c].to_numpy().astype(int), exp[c].to_numpy(), err_msg=c)
    assert validate(t) == 300
    glob_t = open_table(str(tmp_path / "d" / "part-*.parquet"), SCHEMA, columns=["sex"])
    assert glob_t.to_records()[:, 0].tolist() == exp["sex"].tolist()


def test_projection_reads_only_needed_columns(tmp_path: Path) -> None:
    """The Parquet read is restricted to the requested columns (checked on the optimised graph)."""
    df = _raw(40)
    _write_parts(df, tmp_path / "d", 2)
    t = open_table(tmp_path / "d", SCHEMA, columns=["sex", "age"])
    reads = [e for e in t.frame.expr.simplify().walk() if "ReadParquet" in type(e).__name__]
    assert reads and all(sorted(e.columns) == ["age", "sex"] for e in reads)
    assert list(t.frame.columns) == ["sex", "age"]


def test_missing_column_detected_before_compute(tmp_path: Path) -> None:
    """open_table fails eagerly, from metadata/header, when a schema column is absent."""
    df = _raw(10).drop(columns="sex")
    _write_parts(df, tmp_path / "d", 2)
    with pytest.raises(DataError, match=r"column 'sex' is missing from"):
        open_table(tmp_path / "d", SCHEMA)
    df.to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(DataError, match=r"column 'sex' is missing from"):
        open_table(tmp_path / "x.csv", SCHEMA)


def test_validate_reports_bad_value_in_later_file(tmp_path: Path) -> None:
    """validate runs one pass and raises the DataError from whichever partition is bad."""
    df = _raw(30)
    df.loc[25, "workclass"] = 42
    _write_parts(df, tmp_path / "d", 3)
    t = open_table(tmp_path / "d", SCHEMA)
    with pytest.raises(DataError, match=r"column 'workclass' of file '.*part-2.parquet', row 5: a value is outside "
                                        r"the domain \[0, 9\)") as e:
        validate(t)
    assert "42" not in str(e.value).replace(str(tmp_path), "")  # the value, not a digit of pytest's tmp folder
    df2 = _raw(10)
    df2["workclass"] = df2["workclass"].astype(str)
    df2.to_parquet(tmp_path / "s.parquet")
    with pytest.raises(DataError, match=r"column 'workclass' of file '.*s.parquet', row 0: holds text where integer "
                                        "codes are expected"):
        validate(open_table(tmp_path / "s.parquet", SCHEMA))


@pytest.mark.parametrize("name", ["adult", "adult15"])
def test_shared_adult_csv_equals_pandas(name: str) -> None:
    """Shared adult CSVs (integer-coded) ingest to exactly the pandas values, joined by name."""
    folder = DATA / name
    if not (folder / "adult.csv").exists():
        pytest.skip(f"shared data not present at {folder}")
    dom = Domain.load(folder / "adult-domain.json")
    t = open_table(folder / "adult.csv", dom, blocksize=400_000)
    assert t.npartitions >= 2
    got = t.to_pandas()
    exp = pd.read_csv(folder / "adult.csv")[list(dom.attributes)]
    assert list(got.columns) == list(dom.attributes)
    assert all(got[c].dtype == np.uint8 for c in got.columns)
    np.testing.assert_array_equal(got.to_numpy().astype(np.int64), exp.to_numpy().astype(np.int64))


def test_compress_equals_groupby(tmp_path: Path) -> None:
    """compress (dask) and compress_records (numpy) equal pandas groupby counts."""
    rng = np.random.default_rng(3)
    codes = pd.DataFrame({"a": rng.integers(0, 3, 500), "b": rng.integers(0, 4, 500)}).astype(np.uint8)
    _write_parts(codes, tmp_path / "d", 3)
    t = open_table(tmp_path / "d", {"a": 3, "b": 4})
    got = compress(t.frame).compute().sort_values(["a", "b"]).reset_index(drop=True)
    exp = codes.value_counts(["a", "b"]).rename("count").reset_index().sort_values(["a", "b"]).reset_index(drop=True)
    assert got["count"].dtype == np.int64 and got["a"].dtype == np.uint8
    np.testing.assert_array_equal(got.to_numpy().astype(np.int64), exp.to_numpy().astype(np.int64))
    rows, counts = compress_records(codes.to_numpy())
    np.testing.assert_array_equal(np.column_stack([rows.astype(np.int64), counts]), exp.to_numpy().astype(np.int64))
    with pytest.raises(DataError, match="'count'"):
        compress(codes.rename(columns={"a": "count"}))


@pytest.mark.parametrize("name,message", [
    ("nope.csv", r"input '.*nope\.csv' does not exist$"),          # was a FileNotFoundError traceback
    ("nope.parquet", r"input '.*nope\.parquet' does not exist$"),  # was two lines of reader internals
    ("no*.parquet", r"input '.*no\*\.parquet' matches no file$"),   # was "column 'x' is missing ... columns []"
])
def test_missing_input_is_one_clear_line(tmp_path: Path, name: str, message: str) -> None:
    schema = load_schema({"x": 2})
    with pytest.raises(DataError, match=message) as err:
        open_table(str(tmp_path / name), schema)
    assert "\n" not in str(err.value)
    pd.DataFrame({"x": [0, 1]}).to_parquet(tmp_path / "part-0.parquet")
    assert open_table(str(tmp_path / "part-*.parquet"), schema).frame.compute()["x"].tolist() == [0, 1]
