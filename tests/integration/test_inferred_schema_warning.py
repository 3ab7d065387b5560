"""A schema from `privcube schema infer` (NON-PRIVATE) carries `inferred_from_data: true`, and every run that
uses it warns (report.json `warnings`, report.html, one stderr line); hand-written schemas do not."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.core.errors import DomainError
from privcube.report import render_report
from privcube.storage.schema import Schema, load_schema

MARK = "inferred from the private data"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, timeout=300)


def _infer(data: Path, out: Path) -> None:
    proc = _cli("schema", "infer", str(data), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "NON-PRIVATE" in proc.stderr


def test_infer_marks_the_schema_file(tmp_path: Path) -> None:
    pd.DataFrame({"region": ["north", "south", "east"] * 10, "age": np.arange(30) % 5}).to_parquet(tmp_path / "d.parquet")
    _infer(tmp_path / "d.parquet", tmp_path / "s.yaml")
    text = (tmp_path / "s.yaml").read_text()
    assert text.startswith("# NON-PRIVATE")
    assert yaml.safe_load(text)["inferred_from_data"] is True
    schema = load_schema(tmp_path / "s.yaml")
    assert schema.inferred_from_data and schema.names == ("region", "age")
    # the mark survives to_dict / project, and a hand-written schema has none
    assert load_schema(schema.to_dict()).inferred_from_data and schema.project(["age"]).inferred_from_data
    assert not load_schema({"attributes": [{"name": "age", "type": "integer", "size": 5}]}).inferred_from_data
    with pytest.raises(DomainError, match="inferred_from_data must be true or false"):
        load_schema({"inferred_from_data": "yes", "attributes": [{"name": "a", "type": "integer", "size": 2}]})
    assert Schema(schema.attributes) == schema  # the mark does not change the encoding
    shown = _cli("schema", "show", str(tmp_path / "s.yaml"))
    assert shown.returncode == 0 and "inferred_from_data: true" in shown.stderr and "region" in shown.stdout


def test_single_table_run_with_inferred_schema_warns(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pd.DataFrame({"sex": rng.choice(["F", "M"], 200), "age": rng.integers(0, 4, 200)}).to_parquet(tmp_path / "d.parquet")
    _infer(tmp_path / "d.parquet", tmp_path / "inferred.yaml")
    (tmp_path / "public.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]}, {"name": "age", "type": "integer", "size": 4}]}))
    for schema, warned in (("inferred.yaml", True), ("public.yaml", False)):
        cfg = {"data": {"path": "d.parquet", "schema": schema}, "mechanism": {"name": "residual-planner"},
               "workload": [{"kway": 1}], "privacy": {"epsilon": 1.0, "delta": 1e-9}}
        job = tmp_path / f"job-{schema}"
        job.write_text(yaml.safe_dump(cfg))
        out = tmp_path / f"run-{schema}"
        if warned:  # the CLI: report.json, report.html and one stderr line
            proc = _cli("run", str(job), "--out", str(out), "--seed", "1", "--quiet")
            assert proc.returncode == 0, proc.stderr
            lines = [ln for ln in proc.stderr.splitlines() if MARK in ln]
            html = (out / "report.html").read_text()
        else:  # in process (faster): the page rendered as the CLI renders it
            api.run(job, out, seed=1, quiet=True)
            html, lines = render_report(out), []
        rep = json.loads((out / "report.json").read_text())
        if warned:
            assert len(rep["warnings"]) == 1 and MARK in rep["warnings"][0] and "data.schema" in rep["warnings"][0]
            assert "not cover" in rep["warnings"][0]
            assert len(lines) == 1 and lines[0].startswith("privcube: warning:")
            assert '<section id="warnings">' in html and MARK in html
        else:
            assert "warnings" not in rep and not lines and '<section id="warnings">' not in html


def _relational(folder: Path) -> dict:
    rng = np.random.default_rng(1)
    n_u, n_s = 30, 90
    uid = np.arange(n_u) + 100
    pd.DataFrame({"id": uid, "age": rng.integers(0, 3, n_u)}).to_parquet(folder / "users.parquet")
    pd.DataFrame({"user_id": uid[np.arange(n_s) % n_u], "device": rng.choice(["a", "b"], n_s)}).to_parquet(
        folder / "sessions.parquet")
    return {"data": {"tables": {"users": {"path": "users.parquet", "schema": "users.yaml", "key": "id"},
                                "sessions": {"path": "sessions.parquet", "schema": "sessions.yaml"}},
                     "links": {"from": "sessions.user_id", "to": "users.id"}},
            "mechanism": {"name": "relational", "d_max": 5, "k": 2, "iterations": 1, "pgd_iters": 10, "candidates": 20},
            "privacy": {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "sessions": {"epsilon": 1.0, "delta": 1e-6}},
                        "links": {"epsilon": 1.0, "delta": 1e-6}}}


def test_relational_run_names_the_inferred_table(tmp_path: Path) -> None:
    cfg = _relational(tmp_path)
    pd.DataFrame({"device": ["a", "b"] * 5}).to_parquet(tmp_path / "sessions_attrs.parquet")
    _infer(tmp_path / "sessions_attrs.parquet", tmp_path / "sessions.yaml")  # inferred (NON-PRIVATE)
    (tmp_path / "users.yaml").write_text(yaml.safe_dump({"attributes": [{"name": "age", "type": "integer", "size": 3}]}))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    proc = _cli("run", str(tmp_path / "job.yaml"), "--out", str(out), "--seed", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((out / "report.json").read_text())
    schema_warnings = [w for w in rep["warnings"] if MARK in w]
    assert len(schema_warnings) == 1 and "table 'sessions'" in schema_warnings[0] and "users" not in schema_warnings[0]
    assert len([ln for ln in proc.stderr.splitlines() if MARK in ln]) == 1
    assert MARK in (out / "report.html").read_text()
    # the same job with both schemas hand-written: no schema warning
    (tmp_path / "sessions.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "device", "type": "categorical", "categories": ["a", "b"]}]}))
    rep = api.run(tmp_path / "job.yaml", tmp_path / "run2", seed=2, quiet=True).report  # in process: faster
    assert not any(MARK in w for w in rep.get("warnings", []))
    assert not any(MARK in w for w in json.loads((tmp_path / "run2" / "report.json").read_text()).get("warnings", []))
