"""Plug-in points (issue 34): a mechanism, an input format and a cluster kind, each one new module plus one
registry line, used by real runs through ``privcube.run``; the built-in ones declare what the reference is
generated from."""
from __future__ import annotations

import importlib.metadata
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import privcube
from privcube.core.errors import ConfigError, DataError
from privcube.core.params import Param, describe
from privcube.core.plugins import Registry
from privcube.graphs.cluster.kind import ABILITIES as CLUSTER_ABILITIES
from privcube.graphs.cluster.registry import CLUSTER_KINDS
from privcube.storage.formats import FORMATS
from privcube.storage.formats.base import ABILITIES as FORMAT_ABILITIES

DOMAIN = {"a": 3, "b": 4}


def _frame(n: int = 4000, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 4, n)})


def _config(path: Path, **extra: object) -> dict:
    data = {"path": str(path), "domain": dict(DOMAIN), **extra.pop("data", {})}
    return {"data": data, "mechanism": {"name": "residual-planner"}, "workload": [{"kway": 2}],
            "privacy": {"epsilon": 1.0, "delta": 1e-6}, **extra}


def _answers(out: Path) -> dict[str, pd.DataFrame]:
    index = json.loads((out / "answers" / "index.json").read_text())["groups"]
    return {g["file"]: pd.read_parquet(out / "answers" / g["file"]) for g in index}


def _same_answers(a: Path, b: Path) -> None:
    left, right = _answers(a), _answers(b)
    assert list(left) == list(right) and left
    for name in left:
        pd.testing.assert_frame_equal(left[name], right[name])


@pytest.fixture
def reference(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    """The data as Parquet and a seeded run on it: what every plug-in run must reproduce exactly."""
    frame = _frame()
    frame.to_parquet(tmp_path / "d.parquet", index=False)
    out = privcube.run(_config(tmp_path / "d.parquet"), tmp_path / "ref", seed=3, quiet=True).out_dir
    return frame, out


@pytest.fixture
def jsonl() -> object:
    FORMATS.register("jsonl", "jsonl_format:JSONLinesFormat")  # the one registry line of the plug-in
    yield FORMATS
    FORMATS.unregister("jsonl")


@pytest.fixture
def counting_threads() -> object:
    CLUSTER_KINDS.register("counting-threads", "counting_threads_kind:CountingThreads")  # its registry line
    from counting_threads_kind import CountingThreads

    CountingThreads.opened.clear()
    yield CountingThreads
    CLUSTER_KINDS.unregister("counting-threads")


def _write_jsonl(frame: pd.DataFrame, path: Path) -> Path:
    path.write_text("".join(json.dumps({k: int(v) for k, v in row.items()}) + "\n"
                            for row in frame.to_dict(orient="records")))
    return path


def test_an_input_format_plugin_runs_like_parquet(tmp_path, reference, jsonl):
    frame, ref = reference
    src = _write_jsonl(frame, tmp_path / "d.jsonl")
    by_suffix = privcube.run(_config(src), tmp_path / "by-suffix", seed=3, quiet=True).out_dir
    _same_answers(by_suffix, ref)  # the same counts, hence the same seeded answers
    other = _write_jsonl(frame, tmp_path / "d.txt")  # a name no format claims: data.format says which
    named = privcube.run(_config(other, data={"format": "jsonl"}), tmp_path / "named", seed=3, quiet=True).out_dir
    _same_answers(named, ref)
    bad = frame.copy()
    bad.loc[1234, "b"] = 9  # outside the public domain: the file and row are named, never the value
    src_bad = _write_jsonl(bad, tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match=r"column 'b' of file '.*bad\.jsonl', row 1234: a value is outside") as e:
        privcube.run(_config(src_bad), tmp_path / "bad", seed=3, quiet=True)
    assert "9" not in str(e.value).split("row 1234")[1]


def test_an_unknown_format_is_one_line_naming_the_key_and_the_known_formats(tmp_path, reference, jsonl):
    with pytest.raises(ConfigError) as e:
        privcube.plan(_config(tmp_path / "d.parquet", data={"format": "xlsx"}))
    assert str(e.value) == "data.format: unknown input format 'xlsx'; known: parquet, csv, arrow, dataframe, jsonl"
    with pytest.raises(ConfigError, match=r"data\.format: 'dataframe' is a DataFrame given from Python"):
        privcube.plan(_config(tmp_path / "d.parquet", data={"format": "dataframe"}))


def test_a_cluster_kind_plugin_runs_like_threads(tmp_path, reference, counting_threads):
    frame, ref = reference
    cfg = _config(tmp_path / "d.parquet", cluster={"type": "counting-threads", "num_workers": 2, "label": "x"})
    out = privcube.run(cfg, tmp_path / "run", seed=3, quiet=True).out_dir
    _same_answers(out, ref)
    assert counting_threads.opened == [{"num_workers": 2, "label": "x"}]
    assert privcube.plan(cfg).rmse > 0  # the plan sizes it as the kind says (in this process)
    from privcube.admission import planned_layout

    assert planned_layout(cfg["cluster"]).kind == "in-process"
    with pytest.raises(ConfigError, match=r"unknown key 'colour' for cluster type 'counting-threads'; allowed: "
                                          r"\['allow_insecure', 'label', 'num_workers', 'security'\]"):
        privcube.plan({**cfg, "cluster": {"type": "counting-threads", "colour": "red"}})  # checked with the config
    with pytest.raises(ConfigError, match=r"unknown cluster type 'bogus'; choose one of \[.*'counting-threads'\]"):
        privcube.plan({**cfg, "cluster": {"type": "bogus"}})


def test_plugins_come_from_entry_points_too(monkeypatch):
    """A package registers a format or a kind under the entry-point group; nothing is imported until used."""
    ep = importlib.metadata.EntryPoint(name="jsonl", value="jsonl_format:JSONLinesFormat",
                                       group="privcube.input_formats")
    seen: list[str] = []

    def entry_points(group: str) -> list:
        seen.append(group)
        return [ep] if group == "privcube.input_formats" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    reg = Registry("input format", "privcube.input_formats", {"csv": "privcube.storage.formats.csv:CSVFormat"})
    assert reg.names() == ["csv", "jsonl"] and seen == ["privcube.input_formats"]
    assert reg.loaded() == []
    assert reg.get("jsonl", "data.format").name == "jsonl"
    with pytest.raises(ConfigError, match=r"^data\.format: unknown input format 'x'; known: csv, jsonl$"):
        reg.get("x", "data.format")


def test_arrow_ipc_files_run_like_parquet(tmp_path, reference):
    """The third built-in format: Arrow IPC files (Feather v2) and streams, guessed from the suffix or named."""
    import pyarrow as pa
    import pyarrow.feather as feather

    frame, ref = reference
    feather.write_feather(frame, tmp_path / "d.feather", chunksize=1000)
    _same_answers(privcube.run(_config(tmp_path / "d.feather"), tmp_path / "feather", seed=3, quiet=True).out_dir,
                  ref)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    (tmp_path / "parts").mkdir()
    for i, part in enumerate((table.slice(0, 1500), table.slice(1500))):
        with pa.ipc.new_stream(tmp_path / "parts" / f"p{i}.ipc", part.schema) as w:  # streams, in a folder
            w.write_table(part)
    folder = privcube.run(_config(tmp_path / "parts", data={"format": "arrow"}), tmp_path / "folder", seed=3,
                          quiet=True).out_dir
    _same_answers(folder, ref)
    frame.iloc[:10].to_csv(tmp_path / "parts" / "extra.csv", index=False)
    with pytest.raises(DataError, match=r"mixes CSV and Arrow IPC files \(extra\.csv, p0\.ipc, p1\.ipc\)"):
        privcube.run(_config(tmp_path / "parts"), tmp_path / "mixed", seed=3, quiet=True)


def test_every_declared_option_and_ability_is_documented():
    """The reference is generated from the declarations: every option has a type and a one-line meaning, every
    ability is one of the documented ones, every plug-in a description."""
    from privcube.postprocess.spec import PARAMS as POSTPROCESS
    from privcube.synth.spec import PARAMS as SYNTHESIZE

    for name in CLUSTER_KINDS.names():
        kind = CLUSTER_KINDS.get(name, "cluster.type")
        assert kind.description and kind.abilities <= set(CLUSTER_ABILITIES), name
        assert all(isinstance(p, Param) and p.type and p.help for p in kind.OPTIONS.values()), name
        assert set(kind.LOCAL_PATHS) <= set(kind.OPTIONS), name
    for name in FORMATS.names():
        fmt = FORMATS.get(name, "data.format")
        assert fmt.description and fmt.label and fmt.abilities <= set(FORMAT_ABILITIES), name
    for params in (SYNTHESIZE, POSTPROCESS):
        assert all(line.count(":") >= 1 for line in describe(params))
    assert describe({"rows": SYNTHESIZE["rows"]}) == [
        "rows (int >= 0 | auto, default 'auto'): records to write; auto: the noisy record count the answers imply"]


def test_a_mechanism_plugin_plans_runs_and_charges_the_ledger(tmp_path, monkeypatch):
    """A mechanism is one module (tests/support/identity_mechanism.py) plus one registry line; it then plans
    and runs through privcube like the built-in ones, charging exactly its budget."""
    from privcube.mechanisms import REGISTRY

    monkeypatch.setitem(REGISTRY, "gaussian-identity", "identity_mechanism:GaussianIdentity")  # the one line
    frame = _frame()
    job = {"domain": dict(DOMAIN), "mechanism": "gaussian-identity", "workload": [{"kway": 1}, {"kway": 2}],
           "privacy": {"rho": 0.5}, "cluster": "threads"}
    plan = privcube.plan(job)
    sigma = math.sqrt(3 / (2 * 0.5))  # three groups (a, b, a-b) at rho 0.5 / 3 each
    assert plan.mechanism == "gaussian-identity" and plan.rmse == pytest.approx(sigma)
    res = privcube.run(job, out=tmp_path / "run", data=frame, seed=3, quiet=True)
    assert res.ledger["spent"]["rho"] == pytest.approx(0.5, rel=1e-12)
    assert len(res.ledger["charges"]) == 3
    m = res.marginal("a", "b")
    exact = frame.groupby(["a", "b"]).size()
    diff = m.set_index(["a", "b"])["estimate"] - exact.reindex(m.set_index(["a", "b"]).index, fill_value=0)
    assert np.abs(diff).max() < 6 * sigma and np.abs(diff).max() > 0  # noisy, and within 6 sigma
    again = privcube.run(job, out=tmp_path / "again", data=frame, seed=3, quiet=True)
    pd.testing.assert_frame_equal(again.marginal("a", "b"), m)
