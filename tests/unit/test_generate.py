"""Census generator: determinism, file independence, dtypes, domain bounds, correlations, demo frame."""
from __future__ import annotations

import json
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from privcube.core.errors import ConfigError
from privcube.storage.generate import demo_schema, generate_census, generate_demo_frame
from privcube.storage.ingest import encode_frame, open_table, validate
from privcube.storage.schema import load_schema


def _read(files: list[Path]) -> list[pd.DataFrame]:
    """Read each Parquet file with pandas."""
    return [pd.read_parquet(f) for f in files]


def _mutual_information(x: pd.Series, y: pd.Series) -> float:
    """Plug-in mutual information (nats) from a pandas crosstab."""
    p = pd.crosstab(x, y, normalize=True).to_numpy()
    px, py = p.sum(axis=1, keepdims=True), p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log(p[nz] / (px @ py)[nz])).sum())


def test_same_seed_same_files_and_prefix_independence(tmp_path: Path) -> None:
    """Same seed -> same data; file i depends only on (seed, i), not on the total row count."""
    a, dom_a = generate_census(tmp_path / "a", 2500, seed=7, rows_per_file=1000)
    b, _ = generate_census(tmp_path / "b", 2500, seed=7, rows_per_file=1000)
    c, _ = generate_census(tmp_path / "c", 1500, seed=7, rows_per_file=1000)
    d, _ = generate_census(tmp_path / "d", 2500, seed=8, rows_per_file=1000)
    assert [f.name for f in a] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    fa, fb, fc, fd = _read(a), _read(b), _read(c), _read(d)
    assert [len(f) for f in fa] == [1000, 1000, 500] and [len(f) for f in fc] == [1000, 500]
    for x, y in zip(fa, fb):
        pd.testing.assert_frame_equal(x, y)
    pd.testing.assert_frame_equal(fa[0], fc[0])
    pd.testing.assert_frame_equal(fa[1].iloc[:500], fc[1])
    assert not fa[0].equals(fd[0])
    assert list(fa[0].columns) == list(dom_a.attributes)


def test_dtypes_domain_files_and_schema(tmp_path: Path) -> None:
    """Codes are uint8 within [0, size); domain.json and schema.yaml describe the files."""
    files, dom = generate_census(tmp_path / "g", 3000, seed=1, rows_per_file=1500, n_attributes=30)
    assert len(dom) == 30 and min(dom.shape) >= 2 and max(dom.shape) <= 100
    assert json.loads((tmp_path / "g" / "domain.json").read_text()) == dom.to_dict()
    schema = load_schema(tmp_path / "g" / "schema.yaml")
    assert schema.domain == dom
    assert schema.labels("sex") == ["Female", "Male"] and len(schema.labels("state")) == dom["state"]
    df = pd.concat(_read(files), ignore_index=True)
    assert len(df) == 3000
    for name, size in dom.to_dict().items():
        assert df[name].dtype == np.uint8, name
        assert int(df[name].max()) < size, name
    with dask.config.set(scheduler="synchronous"):
        assert validate(open_table(tmp_path / "g", schema)) == 3000


def test_correlations_and_skew(tmp_path: Path) -> None:
    """Planted dependencies (age->marital, education->income) are strong; unrelated pairs are not."""
    files, _ = generate_census(tmp_path / "g", 60_000, seed=3, rows_per_file=30_000)
    df = pd.concat(_read(files), ignore_index=True)
    assert _mutual_information(df["age"], df["marital_status"]) > 0.2
    assert _mutual_information(df["education"], df["income"]) > 0.05
    assert _mutual_information(df["sex"], df["region"]) < 0.005  # independent by construction
    shares = df["race"].value_counts(normalize=True)
    assert shares.iloc[0] > 0.6 and shares.iloc[-1] < 0.03
    # relationship follows marital status and sex: married men are mostly husbands
    married_men = df[(df["marital_status"] == 1) & (df["sex"] == 1)]
    assert (married_men["relationship"] == 0).mean() > 0.8


def test_overwrite_and_bad_arguments(tmp_path: Path) -> None:
    """Existing output needs overwrite=True; bad arguments raise ConfigError naming them."""
    generate_census(tmp_path / "g", 100, rows_per_file=60)
    with pytest.raises(ConfigError, match="overwrite=True"):
        generate_census(tmp_path / "g", 100)
    files, _ = generate_census(tmp_path / "g", 50, rows_per_file=60, overwrite=True, workers=2)
    assert sorted(p.name for p in (tmp_path / "g").glob("part-*.parquet")) == [f.name for f in files] == ["part-00000.parquet"]
    with pytest.raises(ConfigError, match="n_attributes=31"):
        generate_census(tmp_path / "h", 10, n_attributes=31)
    with pytest.raises(ConfigError, match="n_rows=0"):
        generate_census(tmp_path / "h", 0)


def test_demo_frame_exercises_encoding() -> None:
    """The raw demo frame (strings, numbers with NaN, dates) encodes under demo_schema."""
    df = generate_demo_frame(2000, seed=5)
    pd.testing.assert_frame_equal(df, generate_demo_frame(2000, seed=5))
    assert df["sex"].isin(["Female", "Male"]).all() and df["age"].isna().any()
    assert pd.api.types.is_datetime64_any_dtype(df["signup"])
    schema = demo_schema()
    enc = encode_frame(df, schema)
    age_code = pd.cut(df["age"], [15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 100],
                      right=False, labels=False).fillna(16).astype(int)
    np.testing.assert_array_equal(enc["age"].to_numpy().astype(int), age_code.to_numpy())
    assert (enc["signup"].astype(int) == df["signup"].dt.year - 2010).all()
    assert schema.labels("age")[-1] == "missing"


@pytest.mark.slow
def test_throughput_rows_per_second(tmp_path: Path) -> None:
    """Measured generation speed must allow 10^8 rows in minutes (>= 200k rows/s on one shared core)."""
    t0 = time.perf_counter()
    generate_census(tmp_path / "g", 4_000_000, rows_per_file=1_000_000, n_attributes=30)
    rate = 4_000_000 / (time.perf_counter() - t0)
    print(f"generate_census: {rate:,.0f} rows/s (30 attributes)")
    assert rate > 200_000
