"""Issue 33, items 7-9: one line instead of a traceback, warnings or refusals for weak settings, and messages
that say what is wrong.

- 7: a closed scheduler port fails within seconds naming the address; an fsspec protocol whose package is
  missing names the package; (a DataFrame with a repeated column name: tests/integration/test_no_value_in_messages.py).
- 8: delta >= 0.1 refused, delta > 1e-3 warned; privacy_unit.max_rows absurd or a float refused, large warned
  with the plan's RMSE; hdmm / eigen-design noise: laplace with {epsilon, delta} refused; a CSV header naming a
  column twice refused; schema infer --out refuses an existing file without --force; synthesize refuses more
  than MAX_RECORDS rows, checks the disk on a probe before writing, and shows progress.
- 9: numpy-integer domain sizes; pandas categoricals of integer codes; a damaged file among several named;
  --workers 0 names the flag; a progress line left open is ended; report titles and wide charts.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube.core.errors import BudgetError, ConfigError, DataError, RunDirectoryError

JOB = {"mechanism": "residual-planner", "workload": [{"kway": 1}], "privacy": {"epsilon": 1.0, "delta": 1e-9},
       "cluster": "threads"}


def cli(*args: object, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "privcube", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("privcube: error: "), r.stderr
    return lines[0]


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.integers(0, 3, 300), "b": rng.integers(0, 2, 300)}).to_parquet(tmp_path / "d.parquet")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({**JOB, "domain": {"a": 3, "b": 2}, "data": {"path": "d.parquet"},
                                                       "cluster": {"type": "threads"}}))
    return tmp_path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


# ------------------------------------------------------------------------------------------------ item 7
def test_closed_scheduler_port_is_one_line_within_seconds(small: Path) -> None:
    port = _closed_port()
    t0 = time.monotonic()
    r = cli("run", "job.yaml", "--out", "out", "--scheduler-address", f"tcp://127.0.0.1:{port}", cwd=small)
    elapsed = time.monotonic() - t0
    line = one_error_line(r)
    assert f"tcp://127.0.0.1:{port}" in line and "connection refused" in line, line
    assert elapsed < 20, elapsed  # was a 30 s wait, then a 65-line traceback (exit 1)
    assert not (small / "out").exists()


def test_missing_filesystem_package_names_it(small: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("s3fs") is not None:
        pytest.skip("s3fs is installed here: the case needs a protocol whose package is missing")
    cfg = yaml.safe_load((small / "job.yaml").read_text())
    cfg["data"]["path"] = "s3://some-bucket/people.parquet"
    (small / "s3.yaml").write_text(yaml.safe_dump(cfg))
    line = one_error_line(cli("run", "s3.yaml", "--out", "out", cwd=small))
    assert "s3://" in line and "pip install s3fs" in line, line
    with pytest.raises(DataError, match="pip install s3fs"):
        privcube.run({**JOB, "domain": {"a": 3, "b": 2}}, out=small / "api", data="s3://b/x.parquet", quiet=True)
    assert not (small / "out").exists() and not (small / "api").exists()


# ------------------------------------------------------------------------------------------------ item 8
@pytest.mark.parametrize("delta", [0.5, 0.1, 0.99])
def test_a_delta_that_is_not_small_is_refused(delta: float) -> None:
    with pytest.raises(BudgetError, match=r"delta = .* is not small.*refuses delta >= 0.1"):
        privcube.plan({**JOB, "domain": {"a": 3}, "privacy": {"epsilon": 1.0, "delta": delta}})
    with pytest.raises(BudgetError, match="not small"):
        privcube.plan({**JOB, "domain": {"a": 3}, "privacy": {"rho": 0.5, "delta": delta}})


def test_a_large_delta_warns_in_the_terminal_and_report(small: Path) -> None:
    cfg = yaml.safe_load((small / "job.yaml").read_text())
    cfg["privacy"] = {"epsilon": 1.0, "delta": 0.01}
    (small / "d.yaml").write_text(yaml.safe_dump(cfg))
    r = cli("run", "d.yaml", "--out", "out", "--quiet", "--no-report", cwd=small)
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("privcube: warning: privacy.delta = 0.01")]
    assert len(warned) == 1 and "far below 1 / the number of records" in warned[0], r.stderr
    report = json.loads((small / "out" / "report.json").read_text())
    assert any(w.startswith("privacy.delta = 0.01") for w in report["warnings"])
    cfg["privacy"] = {"epsilon": 1.0, "delta": 1e-9}  # a small delta: no warning
    res = privcube.run(cfg | {"data": {"path": str(small / "d.parquet")}}, out=small / "ok", quiet=True)
    assert "warnings" not in res.report


def test_max_rows_absurd_or_float_refused_large_warned_with_the_rmse(tmp_path: Path) -> None:
    job = {**JOB, "domain": {"a": 3}, "privacy_unit": {"id": "uid", "max_rows": 10**9}}
    with pytest.raises(ConfigError, match=r"privacy_unit.max_rows = 1,000,000,000 is beyond any useful bound"):
        privcube.plan(job)
    with pytest.raises(ConfigError, match=r"max_rows must be a whole number written as an integer, got 1e\+09"):
        privcube.plan({**job, "privacy_unit": {"id": "uid", "max_rows": 1e9}})
    with pytest.raises(ConfigError, match=r"max_rows must be a positive integer, got '1e9'"):
        privcube.plan({**job, "privacy_unit": {"id": "uid", "max_rows": "1e9"}})  # YAML reads 1e9 as text
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.integers(0, 3, 400), "uid": rng.integers(0, 50, 400)})
    res = privcube.run({**job, "privacy_unit": {"id": "uid", "max_rows": 500}}, out=tmp_path / "r", data=df,
                       seed=1, quiet=True)
    (warning,) = [w for w in res.report["warnings"] if "max_rows" in w]
    rmse = privcube.plan({**job, "privacy_unit": {"id": "uid", "max_rows": 500}}).rmse
    assert f"expected RMSE per answer is {rmse:.3g}" in warning and "500 times the noise of one row" in warning
    assert rmse > 100 * privcube.plan({**job, "privacy_unit": {"id": "uid", "max_rows": 1}}).rmse
    res = privcube.run({**job, "privacy_unit": {"id": "uid", "max_rows": 5}}, out=tmp_path / "k5", data=df,
                       seed=1, quiet=True)
    assert "warnings" not in res.report


@pytest.mark.parametrize("name", ["hdmm", "eigen-design"])
def test_laplace_with_a_delta_is_refused_naming_both_ways_out(name: str) -> None:
    job = {**JOB, "domain": {"a": 4, "b": 3}, "mechanism": {"name": name, "noise": "laplace"}}
    with pytest.raises(ConfigError) as e:
        privcube.plan(job)  # {epsilon: 1, delta: 1e-9}: was silently Laplace at epsilon 0.17
    msg = str(e.value)
    assert "has no use for privacy.delta" in msg and "epsilon 0.17" in msg and "{epsilon: 1} alone" in msg
    assert "remove noise: laplace" in msg and "\n" not in msg
    pure = privcube.plan({**job, "privacy": {"epsilon": 1.0}})  # the way out: Laplace at epsilon 1
    assert pure.privacy["noise"] == "laplace" and pure.privacy["epsilon"] == 1.0
    gauss = privcube.plan({**job, "mechanism": {"name": name}})
    assert gauss.privacy["noise"] == "gaussian"
    assert privcube.plan({**job, "privacy": {"rho": 0.5}}).privacy["noise"] == "laplace"  # rho: still accepted


def test_csv_with_a_repeated_header_is_refused_naming_column_and_file(tmp_path: Path) -> None:
    from privcube.storage.ingest import open_table

    (tmp_path / "a.csv").write_text("x,y\n1,0\n0,1\n")
    (tmp_path / "b.csv").write_text("x,y,x\n1,0,2\n0,1,2\n")
    with pytest.raises(DataError, match=r"column 'x' appears twice in the header of file '.*b\.csv'"):
        open_table(str(tmp_path / "*.csv"), {"x": 3, "y": 2})
    # a repeated column the job does not read is harmless
    (tmp_path / "b.csv").write_text("x,y,z,z\n1,0,5,6\n0,1,5,6\n")
    assert open_table(str(tmp_path / "*.csv"), {"x": 3, "y": 2}).to_pandas()["x"].tolist() == [1, 0, 1, 0]


def test_schema_infer_keeps_an_existing_file_unless_force(tmp_path: Path) -> None:
    pd.DataFrame({"age": [23, 45, 67], "sex": ["F", "M", "F"]}).to_csv(tmp_path / "p.csv", index=False)
    mine = "attributes:\n- {name: age, type: numeric, bins: [0, 18, 120]}  # written by hand\n"
    (tmp_path / "schema.yaml").write_text(mine)
    line = one_error_line(cli("schema", "infer", "p.csv", "--out", "schema.yaml", cwd=tmp_path))
    assert "exists" in line and "--force" in line
    assert (tmp_path / "schema.yaml").read_text() == mine
    r = cli("schema", "infer", "p.csv", "--out", "schema.yaml", "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load((tmp_path / "schema.yaml").read_text())["inferred_from_data"] is True
    # the proposed bins start at the exact minimum and end just above the exact maximum (non-private, README)
    bins = next(a for a in yaml.safe_load((tmp_path / "schema.yaml").read_text())["attributes"]
                if a["name"] == "age").get("bins")
    assert bins is None or (bins[0] == 23 and 67 < bins[-1] <= 68)


def test_synthesize_refuses_too_many_rows_before_anything_is_spent(tmp_path: Path) -> None:
    from privcube.synth.records import MAX_RECORDS

    job = {**JOB, "domain": {"a": 3}, "synthesize": {"rows": 10**10}}
    with pytest.raises(ConfigError, match=r"synthesize.rows = 10,000,000,000 is above privcube's limit"):
        privcube.run(job, out=tmp_path / "x", data=pd.DataFrame({"a": [0, 1, 2]}), quiet=True)
    assert not (tmp_path / "x").exists() and MAX_RECORDS == 10**9
    with pytest.raises(ConfigError, match="whole number written as an integer"):
        privcube.plan({**job, "synthesize": {"rows": 1e6}})


def test_records_that_would_not_fit_on_the_disk_are_refused_before_writing(tmp_path: Path) -> None:
    """The size is measured on a probe of the records and scaled; here the records are 8-byte random floats
    (incompressible), as many columns as it takes for 10^9 records to need three times the free space."""
    from privcube.synth.records import check_output_size

    free = shutil.disk_usage(tmp_path).free
    columns = math.ceil(3 * free / 1e9 / 8) + 1
    if columns > 2000:
        pytest.skip(f"{free / 2**40:.1f} TiB free: too much to fill with 10^9 records of a sane width")
    rng = np.random.default_rng(0)

    def task(args: tuple) -> pd.DataFrame:
        return pd.DataFrame(rng.random((args[1], columns)), columns=[f"c{i}" for i in range(columns)])

    folder = tmp_path / "records"
    folder.mkdir()
    with pytest.raises(RunDirectoryError, match=r"synthesize: 1,000,000,000 records take about .* but .* is free"):
        check_output_size(task, 10**9, 10**4, folder)
    assert list(folder.iterdir()) == []
    assert check_output_size(task, 1000, 1, folder) < free


def test_large_synthesis_shows_progress(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": np.arange(300) % 3, "b": np.arange(300) % 2})
    (tmp_path / "d.parquet").write_bytes(b"")
    df.to_parquet(tmp_path / "d.parquet")
    cfg = {**JOB, "domain": {"a": 3, "b": 2}, "data": {"path": "d.parquet"}, "cluster": {"type": "threads"},
           "synthesize": {"rows": 600_000, "chunk_size": 50_000}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    r = cli("run", "job.yaml", "--out", "out", "--no-report", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "synthetic records (600,000 rows) [" in r.stderr and "12/12" in r.stderr
    assert len(list((tmp_path / "out" / "synthetic" / "records").glob("*.parquet"))) == 12


# ------------------------------------------------------------------------------------------------ item 9
def test_numpy_integer_domain_sizes_are_accepted(tmp_path: Path) -> None:
    from privcube.storage.schema import load_schema

    assert load_schema({"a": np.int64(4), "b": np.int32(2)}).domain.shape == (4, 2)
    df = pd.DataFrame({"a": [0, 1, 2, 3], "b": [0, 1, 0, 1]})
    res = privcube.run({**JOB, "domain": {"a": np.int64(4), "b": np.uint8(2)}}, out=tmp_path / "r", data=df,
                       seed=1, quiet=True)
    assert len(res.marginal("a")) == 4
    with pytest.raises(Exception, match=r"size 2\.5") as e:  # a bad size is shown as written, not np.float64(...)
        privcube.plan({**JOB, "domain": {"a": np.float64(2.5)}})
    assert "np." not in str(e.value)


def test_pandas_categorical_of_integer_codes_is_accepted(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": pd.Categorical([0, 1, 2, 1, 0, 2] * 10), "b": [0, 1] * 30})
    res = privcube.run({**JOB, "domain": {"a": 3, "b": 2}}, out=tmp_path / "r", data=df, seed=1, quiet=True)
    assert len(res.marginal("a")) == 3
    df["a"] = pd.Categorical([0, 1, 7, 1, 0, 2] * 10)  # a code outside the domain: the rule, not "not an integer"
    with pytest.raises(DataError, match=r"column 'a' of the DataFrame, row 2: a value is outside the domain \[0, 3\)"):
        privcube.run({**JOB, "domain": {"a": 3, "b": 2}}, out=tmp_path / "s", data=df, seed=1, quiet=True)


def _damage(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    for k in range(len(raw) // 3, len(raw) // 3 + 200):  # inside the column chunks; the footer stays intact
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))


def test_a_damaged_file_among_several_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "parts").mkdir()
    for i in range(3):
        frame = pd.DataFrame({"a": rng.integers(0, 3, 100_000), "b": rng.integers(0, 2, 100_000)})
        frame.to_parquet(tmp_path / "parts" / f"p{i}.parquet", index=False, row_group_size=20_000)
    _damage(tmp_path / "parts" / "p1.parquet")
    cfg = {**JOB, "domain": {"a": 3, "b": 2}, "data": {"path": "parts"}, "cluster": {"type": "threads"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    line = one_error_line(cli("run", "job.yaml", "--out", "out", "--quiet", cwd=tmp_path))
    assert "p1.parquet" in line and "damaged or truncated" in line, line
    assert "p0.parquet" not in line and "p2.parquet" not in line
    assert not (tmp_path / "out").exists()
    # CSV: a truncated gzip among plain files
    (tmp_path / "csv").mkdir()
    for i in range(3):
        text = "a,b\n" + "".join(f"{k % 3},{k % 2}\n" for k in range(20_000))
        if i == 2:
            data = gzip.compress(text.encode())
            (tmp_path / "csv" / "c2.csv.gz").write_bytes(data[: len(data) // 2])
        else:
            (tmp_path / "csv" / f"c{i}.csv").write_text(text)
    cfg["data"]["path"] = "csv"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    line = one_error_line(cli("run", "job.yaml", "--out", "out", "--quiet", cwd=tmp_path))
    assert "c2.csv.gz" in line and "c0.csv" not in line, line


def test_workers_zero_names_the_flag(small: Path) -> None:
    line = one_error_line(cli("run", "job.yaml", "--out", "out", "--workers", "0", cwd=small))
    assert "--workers must be a positive integer, got 0" in line and "(none)" not in line


def test_a_progress_line_left_open_is_ended() -> None:
    import io

    from privcube.core import progress

    was_quiet = progress.is_quiet()
    progress.set_quiet(False)  # an earlier quiet run in this process silences bars
    try:
        _fraction_line(io.StringIO())
    finally:
        progress.set_quiet(was_quiet)


def _fraction_line(stream) -> None:  # noqa: ANN001
    from privcube.core import progress

    line = progress.FractionLine(stream)
    line("aim-grem", 0.5)
    line("aim-grem", 0.99996)  # reads 100.0%: ended at once
    assert stream.getvalue().endswith("aim-grem: 100.0%\n")
    line("aim-grem", 0.9991)  # reads 99.9%: left open until something else is printed
    assert not stream.getvalue().endswith("\n")
    line("hdmm", 0.3)  # another label starts on its own line
    assert "99.9%\n\rhdmm:  30.0%" in stream.getvalue()
    progress.end_line()
    assert stream.getvalue().endswith("\n")
    progress.end_line()  # idempotent
    assert not stream.getvalue().endswith("\n\n")


def test_report_titles_and_wide_charts(tmp_path: Path) -> None:
    from privcube.report import figures

    svg = figures.compare("m", "age: published answers", [f"cell {i}" for i in range(40)], np.arange(40.0),
                          np.arange(40.0), (np.arange(40.0) - 1, np.arange(40.0) + 1))
    width = float(re.search(r'width="([0-9.]+)pt"', svg).group(1))
    assert width <= 8.0 * 72 + 1  # a fixed width: no page-wide figure scaled down until its text is unreadable
    assert len(re.findall(r'id="m-published-bar-\d+"', svg)) == 40 and "cell 39" in svg
    few = figures.compare("n", "t", ["F", "M"], [1.0, 2.0])
    assert float(re.search(r'width="([0-9.]+)pt"', few).group(1)) <= figures.MAX_WIDTH * 72 + 1
    n = 300
    tr = figures.trace("tr", list(range(1, n + 1)), [0.1] * n, [0.2] * n, [1.0] * n, [False] * n, ["a,b"] * n)
    assert float(re.search(r'width="([0-9.]+)pt"', tr).group(1)) <= figures.MAX_WIDTH * 72 + 1


def test_a_large_delta_of_a_relational_part_warns(tmp_path: Path) -> None:
    from privcube.relational.report_json import schema_warnings
    from privcube.relational.config import load_relational_config

    from relational_files import _relational

    cfg_path, parents, children = _relational(tmp_path)
    parents.to_parquet(tmp_path / "parents.parquet", index=False)
    children.to_parquet(tmp_path / "children.parquet", index=False)
    raw = yaml.safe_load(cfg_path.read_text())
    assert not [w for w in schema_warnings(load_relational_config(raw, tmp_path)) if "delta" in w]
    raw["privacy"]["links"]["delta"] = 0.01
    (warning,) = [w for w in schema_warnings(load_relational_config(raw, tmp_path)) if "delta" in w]
    assert warning.startswith("privacy links.delta = 0.01 is large")
    raw["privacy"]["links"]["delta"] = 0.2
    with pytest.raises(BudgetError, match="not small"):
        load_relational_config(raw, tmp_path)
