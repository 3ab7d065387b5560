"""The Python API for notebooks: privcube.run(config, out=, data=, seed=) -> Result, privcube.plan.

Checks that a seeded run from a DataFrame writes exactly what the CLI writes for the same rows in a
Parquet file; that DataFrames (pandas, polars), lists of paths and numpy scalars are accepted; that bad
arguments give one-line errors without data values; and that the README's and the Python API page's examples run as doctests.
"""
from __future__ import annotations

import doctest
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import privcube
from privcube import cli
from privcube.core.errors import BudgetError, ConfigError, DataError, WorkloadError

README = Path(__file__).resolve().parents[2] / "README.md"
PYTHON_API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "guides" / "python-api.md"
DOMAIN = {"age": 5, "sex": 2, "region": 3}
SECRET = 987_654_321  # a value planted in the data: it must never appear in an error message


def _frame(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(0, 5, n), "sex": rng.integers(0, 2, n),
                         "region": rng.integers(0, 3, n)})


def _job(**extra: object) -> dict:
    return {"domain": dict(DOMAIN), "mechanism": "residual-planner",
            "workload": [{"kway": 2}, {"kway": 0}], "privacy": {"epsilon": 1.0, "delta": 1e-9},
            "cluster": {"type": "threads"}, **extra}


def _answer_frames(run_dir: Path) -> dict[str, pd.DataFrame]:
    index = json.loads((run_dir / "answers" / "index.json").read_text())
    return {g["file"]: pd.read_parquet(run_dir / "answers" / g["file"]) for g in index["groups"]}


def test_python_api_reproduces_cli_exactly(tmp_path: Path) -> None:
    df = _frame()
    df.to_parquet(tmp_path / "people.parquet")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_job(data={"path": "people.parquet"}), sort_keys=False))
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "cli"), "--seed", "7",
                     "--quiet"]) == 0
    res = privcube.run(_job(), out=tmp_path / "api", data=df, seed=7, quiet=True)
    from_file = privcube.run(tmp_path / "job.yaml", out=tmp_path / "file", data=df, seed=7, quiet=True)

    cli_answers, api_answers = _answer_frames(tmp_path / "cli"), _answer_frames(res.out_dir)
    assert sorted(cli_answers) == sorted(api_answers) and len(cli_answers) == 4
    for name, frame in cli_answers.items():
        pd.testing.assert_frame_equal(frame, api_answers[name], check_exact=True)
        pd.testing.assert_frame_equal(frame, _answer_frames(from_file.out_dir)[name], check_exact=True)
    index = "answers/index.json"
    assert json.loads((tmp_path / "cli" / index).read_text()) == json.loads((res.out_dir / index).read_text())
    assert json.loads((tmp_path / "cli" / "ledger.json").read_text()) == \
        json.loads((res.out_dir / "ledger.json").read_text()) == res.ledger


def test_result_marginal_ledger_and_old_attributes(tmp_path: Path) -> None:
    res = privcube.run(_job(), out=tmp_path / "r", data=_frame(), seed=1, quiet=True)
    assert isinstance(res, privcube.Result) and isinstance(res, privcube.api.RunSummary)
    assert res.out_dir == tmp_path / "r" and res.report["mechanism"] == "residual-planner"
    assert len(res.result.answers) == 4
    m = res.marginal("sex", "age")  # asked in another order than the workload's (age, sex)
    assert list(m.columns[:2]) == ["sex", "age"] and len(m) == 10
    assert {"estimate", "variance"} <= set(m.columns)
    stored = res.answers(0)  # group 0 is the (age, sex) marginal
    merged = m.merge(stored, on=["age", "sex"], suffixes=("", "_file"))
    assert np.array_equal(merged["estimate"].to_numpy(), merged["estimate_file"].to_numpy())
    total = res.marginal()
    assert len(total) == 1 and abs(float(total["estimate"].iloc[0]) - 600) < 100
    with pytest.raises(WorkloadError, match="no marginal over"):
        res.marginal("age", "sex", "region")
    assert res.ledger["spent"]["rho"] <= res.ledger["budget"]["rho"] * (1 + 1e-12)
    with pytest.raises(ConfigError, match="made no synthetic records"):
        res.synthetic()


def test_result_synthetic_records_with_labels(tmp_path: Path) -> None:
    schema = {"attributes": [{"name": "sex", "type": "categorical", "categories": ["F", "M"]},
                             {"name": "age", "type": "numeric", "bins": [0, 2, 4, 5]}]}
    job = {"data": {"schema": schema}, "mechanism": "residual-planner", "workload": [{"kway": 2}],
           "privacy": {"rho": 1.0}, "cluster": "threads", "synthesize": {"rows": 50}}
    df = pd.DataFrame({"sex": np.array(["F", "M"])[np.arange(200) % 2], "age": np.arange(200) % 5})
    res = privcube.run(job, out=tmp_path / "s", data=df, seed=2, quiet=True)
    rec = res.synthetic()
    assert len(rec) == 50 and set(rec["sex_label"]) <= {"F", "M"}
    m = res.marginal("age", "sex")
    assert list(m.columns) == ["age", "age_label", "sex", "sex_label", "estimate", "published", "variance", "ci_low", "ci_high"]
    assert len(m) == 6
    assert list(m.loc[m["sex"] == 1, "sex_label"].unique()) == ["M"]


def test_plan_returns_data() -> None:
    p = privcube.plan(_job())
    assert p.mechanism == "residual-planner" and p.rmse > 0
    frame = p.to_frame()
    assert len(frame) == 4 and (frame["rmse"] > 0).all()
    assert p.to_dict()["groups"][0]["rmse"] == pytest.approx(float(frame["rmse"].iloc[0]))


def test_list_of_paths_and_numpy_scalars(tmp_path: Path) -> None:
    df = _frame(400)
    df.iloc[:200].to_parquet(tmp_path / "a.parquet")
    df.iloc[200:].to_parquet(tmp_path / "b.parquet")
    job = _job(privacy={"epsilon": np.float32(1.0), "delta": np.float64(1e-9)})
    by_list = privcube.run(job, out=tmp_path / "list", data=[tmp_path / "a.parquet", str(tmp_path / "b.parquet")],
                           seed=np.int64(3), quiet=True)
    by_cfg = privcube.run({**_job(), "data": {"path": [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]}},
                          out=tmp_path / "cfg", seed=3, quiet=True)
    by_frame = privcube.run(_job(), out=tmp_path / "frame", data=df, seed=3, quiet=True)
    for other in (by_cfg, by_frame):
        pd.testing.assert_frame_equal(by_list.marginal("age", "region"), other.marginal("age", "region"))
    rho = privcube.run(_job(privacy={"rho": np.float16(0.5)}), out=tmp_path / "rho", data=df, quiet=True)
    assert rho.ledger["budget"]["rho"] == 0.5


def test_polars_dataframe(tmp_path: Path) -> None:
    if importlib.util.find_spec("polars") is None:
        pytest.skip("polars is not installed (optional: pip install polars)")
    import polars as pl

    df = _frame()
    a = privcube.run(_job(), out=tmp_path / "pd", data=df, seed=5, quiet=True)
    b = privcube.run(_job(), out=tmp_path / "pl", data=pl.from_pandas(df), seed=5, quiet=True)
    c = privcube.run(_job(), out=tmp_path / "lazy", data=pl.from_pandas(df).lazy(), seed=5, quiet=True)
    for other in (b, c):
        for name, frame in _answer_frames(a.out_dir).items():
            pd.testing.assert_frame_equal(frame, _answer_frames(other.out_dir)[name], check_exact=True)


def test_dataframe_on_a_local_cluster(tmp_path: Path) -> None:
    df = _frame(800)
    threads = privcube.run(_job(), out=tmp_path / "t", data=df, seed=9, quiet=True)
    local = privcube.run(_job(cluster={"type": "local", "n_workers": 1, "threads_per_worker": 1,
                                       "local_directory": str(tmp_path / "scratch")}),
                         out=tmp_path / "l", data=df, seed=9, quiet=True)
    for name, frame in _answer_frames(threads.out_dir).items():
        pd.testing.assert_frame_equal(frame, _answer_frames(local.out_dir)[name], check_exact=True)
    assert not any((tmp_path / "scratch").iterdir()) if (tmp_path / "scratch").exists() else True


def _one_line_without_secret(excinfo: pytest.ExceptionInfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and str(SECRET) not in msg and "987" not in msg
    return msg


def test_bad_python_inputs_are_one_line_without_data_values(tmp_path: Path) -> None:
    df = _frame()
    df.loc[3, "age"] = SECRET
    with pytest.raises(ConfigError) as e:  # a frame inside a list: refused by type, never printed
        privcube.run({**_job(), "data": {"path": [df]}}, out=tmp_path / "a", quiet=True)
    assert "DataFrame" in _one_line_without_secret(e)
    with pytest.raises(ConfigError) as e:
        privcube.run(_job(), out=tmp_path / "b", data=df["age"].to_numpy(), quiet=True)
    assert "ndarray" in _one_line_without_secret(e)
    with pytest.raises(ConfigError) as e:
        privcube.run({**_job(), "data": {"path": {"x": SECRET}}}, out=tmp_path / "c", quiet=True)
    assert "dict" in _one_line_without_secret(e)
    with pytest.raises(ConfigError, match="out: expected a folder path"):
        privcube.run(_job(), out=12345, data=df)
    with pytest.raises(ConfigError, match="config: expected a file path, a mapping"):
        privcube.run([_job()], out=tmp_path / "d", data=df)
    with pytest.raises(ConfigError, match="config: expected a file path, a mapping"):
        privcube.plan([1, 2])
    with pytest.raises(DataError, match="column 'region' is missing from the DataFrame"):
        privcube.run(_job(), out=tmp_path / "e", data=df[["age", "sex"]], quiet=True)
    for t in "abcde":
        assert not (tmp_path / t).exists()


@pytest.mark.parametrize("privacy, word", [({"epsilon": 1e308, "delta": 1e-9}, "epsilon"),
                                           ({"epsilon": 1e308}, "epsilon"), ({"rho": 1e308}, "rho")])
def test_huge_privacy_parameters_name_the_parameter(privacy: dict, word: str) -> None:
    with pytest.raises(BudgetError) as e:
        privcube.plan(_job(privacy=privacy))
    msg = str(e.value)
    assert msg.startswith(f"privacy parameter {word} = 1e+308 is too large")
    assert ("rho" not in msg) if word == "epsilon" else True


def test_dataframe_in_config_is_never_copied_into_config_yaml(tmp_path: Path) -> None:
    df = _frame()
    df.loc[0, "age"] = 4
    res = privcube.run({**_job(), "data": {"path": df}}, out=tmp_path / "r", seed=1, quiet=True)
    text = (res.out_dir / "config.yaml").read_text()
    assert "DataFrame given in Python" in text and len(text) < 5000


def _doctest_examples(path: Path) -> str:
    text = path.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return "\n".join(b for b in blocks if ">>>" in b)


@pytest.mark.parametrize("path, at_least", [(README, 5), (PYTHON_API_PAGE, 8)], ids=["README", "python-api-page"])
def test_documented_examples_run_as_doctests(path: Path, at_least: int, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's example and the Python API page's examples (docs/pages/guides/python-api.md, where the
    README's Python API section now lives) run as written."""
    source = _doctest_examples(path)
    assert source.count(">>>") >= at_least, f"{path.name} has no doctest examples"
    monkeypatch.chdir(tmp_path)  # the examples write their run folders here
    test = doctest.DocTestParser().get_doctest(source, {}, path.name, str(path), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= at_least and result.failed == 0
