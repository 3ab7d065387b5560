"""No record value in any message: every error path of data validation names the column, the file (or the
DataFrame) and the rule broken, never the offending value (issue 33, item 4).

Distinctive values are planted where validation must refuse them (out-of-domain and negative codes, unknown
categories, a category with a leading space, text in a numeric column, unparsable numbers and dates, whole
numbers expected, a column of another type in one of several files) and in identifier columns (person ids,
table keys, foreign keys) whose rows are refused for another reason. Each case runs through the CLI (stdout,
stderr and every file left in the run folder or its parent) or the Python API (the exception's text and every
chained cause and context); none of the planted values may appear, and the message must name the column and
where it was read.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube.core.errors import DataError, PrivcubeError
from relational_files import _relational

# what must never be printed: distinctive values planted in the data (numbers are matched as whole tokens)
SECRET_TEXT = ("ZZSECRET", "forty", "' F'", "ZZDATE", "IDSECRET", "KEYSECRET", "FKSECRET")
SECRET_NUMBERS = ("987654", "46", "9876.54", "-987654", "555001", "77123")


def leaks(text: str) -> list[str]:
    """The planted values found in ``text``."""
    found = [s for s in SECRET_TEXT if s in text]
    found += [n for n in SECRET_NUMBERS if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", text)]
    return found


def test_the_search_finds_planted_values() -> None:
    assert leaks("column 'a': value 987654 is outside") == ["987654"]
    assert leaks("value '46' is not a number; 'ZZSECRET1'") == ["ZZSECRET", "46"]
    assert leaks("value ' F' is not a known category") == ["' F'"]
    assert leaks("row 460, 4.6, 1987654, x46y") == []


def chain_text(e: BaseException) -> str:
    """The text of an exception and of every exception chained to it (cause and context)."""
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n".join(out)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "privcube", *map(str, args)], capture_output=True, text=True,
                          timeout=240, cwd=cwd, env=env)


def files_text(folder: Path) -> str:
    """Everything written under ``folder`` except the input data the test wrote itself."""
    parts = []
    for p in folder.rglob("*"):
        if p.is_file() and p.suffix not in (".parquet", ".csv") and p.name != "job.yaml":
            parts.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def check_cli_refusal(r: subprocess.CompletedProcess, folder: Path, *needles: str) -> str:
    """One error line (exit 2) naming ``needles`` (column, file, rule); no planted value anywhere."""
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("privcube: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    found = leaks(r.stdout) + leaks(r.stderr) + leaks(files_text(folder))
    assert not found, (found, r.stderr)
    assert not (folder / "out").exists()  # nothing partial
    return lines[0]


def check_api_refusal(call, *needles: str, error=DataError) -> str:  # noqa: ANN001
    with pytest.raises(PrivcubeError) as info:
        call()
    assert isinstance(info.value, error), chain_text(info.value)
    text = chain_text(info.value)
    assert not leaks(text), (leaks(text), text)
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg


def job(folder: Path, data: dict, **extra) -> Path:  # noqa: ANN003
    cfg = {"data": data, "mechanism": {"name": "residual-planner"}, "workload": [{"kway": 1}],
           "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": {"type": "threads"}, **extra}
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "job.yaml"


RICH = {"attributes": [
    {"name": "age", "type": "numeric", "bins": [0, 18, 65, 120]},
    {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
    {"name": "since", "type": "date", "bins": ["2000-01-01", "2010-01-01", "2030-01-01"]},
    {"name": "code", "type": "integer", "size": 4}]}


def rich_rows(n: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(1, 100, n).astype(float), "sex": rng.choice(["F", "M"], n),
                         "since": pd.to_datetime("2005-01-01") + pd.to_timedelta(rng.integers(0, 4000, n), unit="D"),
                         "code": rng.integers(0, 4, n), "uid": [f"IDSECRET{k % 7}" for k in range(n)]})


# ------------------------------------------------------------------------------------------ CLI, files
@pytest.mark.parametrize("case", ["out_of_domain", "negative", "not_whole", "category", "space", "date",
                                  "csv_not_a_number", "parquet_text_in_one_file"])
def test_cli_value_errors_name_column_file_and_rule_never_the_value(tmp_path: Path, case: str) -> None:
    frame = rich_rows()
    files = [tmp_path / "data" / "p0.parquet", tmp_path / "data" / "p1.parquet"]
    files[0].parent.mkdir()
    bad_row = 7  # of the second file
    second = frame.iloc[15:].reset_index(drop=True).copy()
    column, rule = {
        "out_of_domain": ("code", "outside the domain [0, 4)"),
        "negative": ("code", "outside the domain [0, 4)"),
        "not_whole": ("code", "not a whole number"),
        "category": ("sex", "not one of the categories ['F', 'M']"),
        "space": ("sex", "case and spaces count"),
        "date": ("since", "not a date"),
        "csv_not_a_number": ("age", "not a number"),
        "parquet_text_in_one_file": ("age", "holds text where numbers are expected"),
    }[case]
    if case == "out_of_domain":
        second.loc[bad_row, "code"] = 987654
    elif case == "negative":
        second.loc[bad_row, "code"] = -987654
    elif case == "not_whole":
        second["code"] = second["code"].astype(float)
        second.loc[bad_row, "code"] = 9876.54
    elif case == "category":
        second.loc[bad_row, "sex"] = "ZZSECRET"
    elif case == "space":
        second.loc[bad_row, "sex"] = " F"
    elif case == "date":
        second["since"] = second["since"].dt.strftime("%Y-%m-%d")
        second.loc[bad_row, "since"] = "ZZDATE-31"
    elif case == "parquet_text_in_one_file":  # the same column is text in one file, numbers in the other
        second["age"] = second["age"].map(lambda v: f"{v:g}").astype(object)
        second.loc[bad_row, "age"] = "forty"
        second.loc[bad_row + 1, "age"] = "46"
    if case == "csv_not_a_number":
        files = [f.with_suffix(".csv") for f in files]
        second["age"] = second["age"].map(lambda v: f"{v:g}").astype(object)
        second.loc[bad_row, "age"] = "forty"
        frame.iloc[:15].to_csv(files[0], index=False)
        second.to_csv(files[1], index=False)
    else:
        frame.iloc[:15].to_parquet(files[0], index=False)
        second.to_parquet(files[1], index=False)
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(RICH))
    cfg = job(tmp_path, {"path": "data", "schema": "schema.yaml"})
    r = cli("run", cfg, "--out", tmp_path / "out", "--seed", "1", "--quiet", cwd=tmp_path)
    row = 0 if case == "parquet_text_in_one_file" else bad_row  # that file's column is text from its first row
    line = check_cli_refusal(r, tmp_path, f"column {column!r}", f"file {str(files[1])!r}", f"row {row}", rule)
    assert "value " not in line.replace("a value ", "")  # the old wording ("value X is ...") is gone


def test_cli_privacy_unit_ids_and_csv_header(tmp_path: Path) -> None:
    """Person ids never appear (a row refused for its category, a missing id), and a CSV header naming a column
    twice is refused naming the column and the file instead of silently using the first one."""
    frame = rich_rows()
    frame.loc[3, "sex"] = "ZZSECRET"
    (tmp_path / "data").mkdir()
    frame.to_parquet(tmp_path / "data" / "p.parquet", index=False)
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(RICH))
    cfg = job(tmp_path, {"path": "data", "schema": "schema.yaml"}, privacy_unit={"id": "uid", "max_rows": 2})
    r = cli("run", cfg, "--out", tmp_path / "out", "--quiet", cwd=tmp_path)
    check_cli_refusal(r, tmp_path, "column 'sex'", "p.parquet", "row 3", "not one of the categories")

    frame = rich_rows()
    frame["uid"] = frame["uid"].astype(object)
    frame.loc[5, "uid"] = None
    frame.to_parquet(tmp_path / "data" / "p.parquet", index=False)
    r = cli("run", cfg, "--out", tmp_path / "out", "--quiet", cwd=tmp_path)
    check_cli_refusal(r, tmp_path, "column 'uid'", "p.parquet", "row 5", "privacy_unit.id")

    (tmp_path / "data" / "p.parquet").unlink()
    text = "age,sex,since,code,sex\n" + "".join(f"{20 + k},F,2006-01-01,1,ZZSECRET{k}\n" for k in range(5))
    (tmp_path / "data" / "p.csv").write_text(text)
    cfg = job(tmp_path, {"path": "data", "schema": "schema.yaml"})
    r = cli("run", cfg, "--out", tmp_path / "out", "--quiet", cwd=tmp_path)
    check_cli_refusal(r, tmp_path, "column 'sex'", "p.csv", "twice")


@pytest.mark.parametrize("case", ["category", "duplicate_key", "dangling_fk"])
def test_cli_relational_inputs_name_no_key_or_value(tmp_path: Path, case: str) -> None:
    cfg, parents, children = _relational(tmp_path)
    if case == "category":
        children.loc[9, "kind"] = "ZZSECRET"
        needles = ("table 'children'", "column 'kind'", "children.parquet", "row 9", "not one of the categories")
    elif case == "duplicate_key":
        parents.loc[4, "id"] = "KEYSECRET1"
        needles = ("table 'parents'", "key column 'id'", "row 4", "keys must be unique")
    else:
        children.loc[6, "pid"] = "FKSECRET9"
        needles = ("links", "row 6", "not a key")
    parents.to_parquet(tmp_path / "parents.parquet", index=False)
    children.to_parquet(tmp_path / "children.parquet", index=False)
    r = cli("run", cfg, "--out", tmp_path / "out", "--seed", "1", "--quiet", cwd=tmp_path)
    check_cli_refusal(r, tmp_path, *needles)


# ------------------------------------------------------------------------------------------ Python API
API_JOB = {"mechanism": "residual-planner", "workload": [{"kway": 1}], "privacy": {"epsilon": 1.0, "delta": 1e-9},
           "cluster": "threads"}


def _api(tmp_path: Path, frame: pd.DataFrame, **spec):  # noqa: ANN003, ANN202
    return lambda: privcube.run({**API_JOB, **spec}, out=tmp_path / "out", data=frame, seed=1, quiet=True)


@pytest.mark.parametrize("case", ["out_of_domain", "negative", "category", "space", "text_46", "forty",
                                  "categorical_codes_for_labels", "date"])
def test_api_dataframe_errors_name_column_and_row(tmp_path: Path, case: str) -> None:
    rich = {"data": {"schema": RICH}}
    df = rich_rows().drop(columns="uid")
    if case in ("out_of_domain", "negative"):
        df.loc[11, "code"] = 987654 if case == "out_of_domain" else -987654
        needles = ("column 'code'", "the DataFrame", "row 11", "outside the domain [0, 4)")
    elif case == "category":
        df.loc[11, "sex"] = "ZZSECRET"
        needles = ("column 'sex'", "row 11", "not one of the categories")
    elif case == "space":
        df.loc[11, "sex"] = " F"
        needles = ("column 'sex'", "row 11", "spaces count")
    elif case == "text_46":  # numbers stored as text in a DataFrame: refused by type, not by showing one
        df["age"] = df["age"].map(lambda v: f"{v:g}")
        df.loc[0, "age"] = "46"
        needles = ("column 'age'", "row 0", "holds text where numbers are expected")
    elif case == "forty":  # a column of numbers and text: Dask stores it as text, so it is text from row 0
        df["age"] = df["age"].astype(object)
        df.loc[11, "age"] = "forty"
        needles = ("column 'age'", "row 0", "holds text")
    elif case == "categorical_codes_for_labels":  # integer codes where the schema lists labels
        df["sex"] = (df["sex"] == "M").astype(int)
        df.loc[11, "sex"] = 987654
        needles = ("column 'sex'", "categories are labels ['F', 'M']", "type: integer, size: 2")
    else:
        df["since"] = df["since"].dt.strftime("%Y-%m-%d")
        df.loc[11, "since"] = "ZZDATE"
        needles = ("column 'since'", "row 11", "not a date")
    check_api_refusal(_api(tmp_path, df, **rich), *needles)
    assert not (tmp_path / "out").exists()


def test_api_integer_domain_frame_and_weights(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": [0, 1, 2, 3] * 5, "b": [0, 1] * 10})
    df.loc[13, "a"] = 987654
    check_api_refusal(_api(tmp_path, df, domain={"a": 4, "b": 2}), "column 'a'", "row 13", "outside the domain")
    df = pd.DataFrame({"a": [0.0, 1.0, 2.0, 9876.54], "b": [0, 1, 0, 1]})
    check_api_refusal(_api(tmp_path, df, domain={"a": 4, "b": 2}), "column 'a'", "row 3", "not a whole number")


def test_api_privacy_unit_frame_never_shows_an_id(tmp_path: Path) -> None:
    df = rich_rows()
    df.loc[2, "code"] = 987654
    check_api_refusal(_api(tmp_path, df, data={"schema": RICH}, privacy_unit={"id": "uid", "max_rows": 3}),
                      "column 'code'", "row 2", "outside the domain")
    df = rich_rows()
    df["uid"] = df["uid"].astype(object)
    df.loc[8, "uid"] = None
    check_api_refusal(_api(tmp_path, df, data={"schema": RICH}, privacy_unit={"id": "uid", "max_rows": 3}),
                      "column 'uid'", "row 8", "privacy_unit.id")


def test_dataframe_with_a_repeated_column_name_is_one_line(tmp_path: Path) -> None:
    df = pd.DataFrame([[0, 987654], [1, 2]], columns=["a", "a"])
    check_api_refusal(_api(tmp_path, df, domain={"a": 4}), "two columns named 'a'")


def test_validation_api_direct_and_exact_marginals(tmp_path: Path) -> None:
    """The storage API (open_table + validate) and `privcube marginals` (exact counts, no run folder) too."""
    from privcube.storage.ingest import open_table, validate

    (tmp_path / "d").mkdir()
    pd.DataFrame({"a": [0, 1, 2], "b": [1, 0, 1]}).to_parquet(tmp_path / "d" / "x0.parquet", index=False)
    pd.DataFrame({"a": [0, 1, 987654], "b": [1, 0, 1]}).to_parquet(tmp_path / "d" / "x1.parquet", index=False)
    with pytest.raises(DataError) as info:
        validate(open_table(tmp_path / "d", {"a": 4, "b": 2}))
    msg = str(info.value)
    assert not leaks(chain_text(info.value)) and "x1.parquet" in msg and "row 2" in msg, msg
    (tmp_path / "dom.json").write_text(json.dumps({"a": 4, "b": 2}))
    r = cli("marginals", tmp_path / "d", "--schema", tmp_path / "dom.json", "--attrs", "a",
            "--out", tmp_path / "m.parquet", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "column 'a'" in r.stderr and not leaks(r.stderr + r.stdout), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "m.parquet").exists()
