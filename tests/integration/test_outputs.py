"""Run directory: owner-only, atomic writes, refuses finished runs, tidy answer tables."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import RunDirectoryError
from privcube.mechanisms.base import GroupAnswer
from privcube.storage.outputs import RunDirectory, answer_frame
from privcube.core.workload import Workload, group


def test_owner_only_and_refuses_finished(tmp_path):
    rd = RunDirectory(tmp_path / "run")
    rd.check_usable(resume=False)
    rd.create()
    mode = stat.S_IMODE(os.stat(rd.path).st_mode)
    assert mode == 0o700
    rd.write_json("ledger.json", {"x": 1})
    assert stat.S_IMODE(os.stat(rd.path / "ledger.json").st_mode) == 0o600
    with pytest.raises(RunDirectoryError, match="--resume"):
        RunDirectory(rd.path).check_usable(resume=False)
    RunDirectory(rd.path).check_usable(resume=True)
    rd.mark_complete()
    with pytest.raises(RunDirectoryError, match="finished run"):
        RunDirectory(rd.path).check_usable(resume=True)


def test_resume_needs_a_run(tmp_path):
    with pytest.raises(RunDirectoryError, match="no run to resume"):
        RunDirectory(tmp_path / "none").check_usable(resume=True)


def test_discard_only_what_it_created(tmp_path):
    existing = tmp_path / "keep"
    existing.mkdir()
    rd = RunDirectory(existing)
    rd.create()
    rd.discard_if_created()
    assert existing.exists()
    rd2 = RunDirectory(tmp_path / "new")
    rd2.create()
    rd2.discard_if_created()
    assert not (tmp_path / "new").exists()


def test_answer_tables_and_index(tmp_path):
    dom = Domain.from_mapping({"a": 2, "b": 3})
    wl = Workload(dom, (group(dom, ["a", "b"]), group(dom, ["b"], "prefix")))
    est_ab = np.arange(6, dtype=float)
    answers = [GroupAnswer(wl.groups[0], est_ab, np.full(6, 2.5)), GroupAnswer(wl.groups[1], np.array([1.0, 2, 3]))]
    rd = RunDirectory(tmp_path / "r")
    rd.create()
    folder = rd.write_answers(answers, dom)
    index = json.loads((folder / "index.json").read_text())["groups"]
    assert [g["attributes"] for g in index] == [["a", "b"], ["b"]]
    assert index[1]["queries"] == {"b": "prefix"}
    t0 = pd.read_parquet(folder / index[0]["file"])
    assert list(t0.columns) == ["a", "b", "estimate", "variance", "ci_low", "ci_high"]
    # noise of unknown kind: the Chebyshev bound sd/sqrt(1 - level) (privcube.privacy.intervals)
    assert np.allclose(t0["ci_high"] - t0["estimate"], np.sqrt(2.5 / 0.05))
    assert index[0]["ci"] == {"level": 0.95, "method": "bound"} and index[1]["ci"]["method"] == "none"
    # C order over (a, b): row r is cell (r // 3, r % 3)
    assert t0["a"].tolist() == [0, 0, 0, 1, 1, 1] and t0["b"].tolist() == [0, 1, 2, 0, 1, 2]
    assert t0["estimate"].tolist() == est_ab.tolist()
    t1 = pd.read_parquet(folder / index[1]["file"])
    assert list(t1.columns) == ["query", "description", "estimate"]
    assert t1["description"].tolist() == ["b <= 0", "b <= 1", "b <= 2"]


def test_query_descriptions_follow_matrix_rows():
    """Every non-marginal query is described; row order is the Kronecker order of the matrix."""
    dom = Domain.from_mapping({"a": 3, "b": 2, "c": 4})
    g = group(dom, ["a", "b"], {"a": "allrange", "b": "identity"})
    desc = g.row_descriptions(dom, {"b": ["F", "M"]})
    m = g.matrix(dom)
    assert len(desc) == m.shape[0] == 12
    assert desc[0] == "a in [0, 0] & b = F" and desc[1] == "a in [0, 0] & b = M"
    assert desc[3] == "a in [0, 1] & b = M"
    # row 3 counts cells a in {0,1}, b = M (C order over (a, b): cell index 2a + b)
    assert np.flatnonzero(m[3]).tolist() == [1, 3]
    joint = group(dom, ["a", "c"], "affine")
    assert joint.row_descriptions(dom) == [f"a + c <= {k}" for k in range(6)]
    absd = group(dom, ["a", "c"], "abs-diff")
    assert absd.row_descriptions(dom)[-1] == "|a - c| <= 3"
    circ = group(dom, ["a"], "circular").row_descriptions(dom)
    assert len(circ) == 9 and circ[5] == "a in [1, 0] (circular)"  # start 1, length 3 wraps to 0


def test_answer_frame_rejects_wrong_size():
    dom = Domain.from_mapping({"a": 2, "b": 3})
    g = group(dom, ["a", "b"])
    with pytest.raises(ValueError, match="5 estimates for 6 cells"):
        answer_frame(GroupAnswer(g, np.zeros(5)), dom)


def _published_job(folder, output):  # noqa: ANN001, ANN202
    """A small AIM+GReM job (it checkpoints into store.zarr) with the given output section."""
    import yaml

    rng = np.random.default_rng(4)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"a": rng.integers(0, 3, 2000), "b": rng.integers(0, 4, 2000), "c": rng.integers(0, 2, 2000)}
                 ).to_parquet(folder / "data" / "p.parquet", index=False)
    cfg = {"data": {"path": "data", "domain": {"a": 3, "b": 4, "c": 2}}, "mechanism": {"name": "aim-grem"},
           "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6}, "cluster": "threads",
           "output": output}
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "job.yaml"


def test_output_answers_and_zarr_receive_published_copies(tmp_path):
    """output.answers / output.zarr (relative to the config) get the run's answers and tensors, without the
    checkpoints; an occupied destination is refused before any data is read unless --overwrite."""
    from privcube import api
    from privcube.storage.zarr_store import TensorStore

    cfg = _published_job(tmp_path, {"answers": "pub/answers", "zarr": "pub/store.zarr"})
    out = tmp_path / "run"
    api.run(cfg, out, seed=1, quiet=True)
    pub = tmp_path / "pub"
    assert (out / "store.zarr" / "checkpoint").is_dir()  # the run itself keeps its resume state
    assert sorted(p.name for p in (pub / "answers").iterdir()) == sorted(p.name for p in (out / "answers").iterdir())
    for f in (out / "answers").iterdir():
        assert (pub / "answers" / f.name).read_bytes() == f.read_bytes()
    assert not (pub / "store.zarr" / "checkpoint").exists()
    got, ref = TensorStore(pub / "store.zarr", mode="r"), TensorStore(out / "store.zarr", mode="r")
    names = [n for n in ref.names() if not n.startswith("checkpoint")]
    assert names and sorted(got.names()) == sorted(names)
    for n in names:
        assert np.array_equal(got.read(n), ref.read(n))
    assert not [p for p in pub.iterdir() if p.name.startswith(".")]  # no staging folders left

    with pytest.raises(RunDirectoryError, match=r"output\.answers .* already exists"):
        api.run(cfg, tmp_path / "run2", seed=1, quiet=True)
    assert not (tmp_path / "run2").exists()  # refused before anything was measured or written
    api.run(cfg, tmp_path / "run2", seed=2, quiet=True, overwrite=True)  # a copy privcube published: replaced
    for f in (tmp_path / "run2" / "answers").glob("*.parquet"):
        assert (pub / "answers" / f.name).read_bytes() == f.read_bytes()
    (pub / "answers" / "marker").write_text("old")  # ... but never a folder holding anything else (issue 33)
    with pytest.raises(RunDirectoryError, match="did not write"):
        api.run(cfg, tmp_path / "run3", seed=3, quiet=True, overwrite=True)
    assert (pub / "answers" / "marker").read_text() == "old" and not (tmp_path / "run3").exists()


def test_output_answers_to_an_fsspec_url(tmp_path):
    import fsspec

    from privcube import api

    url = f"memory://privcube-test-{os.getpid()}/answers"
    cfg = _published_job(tmp_path, {"answers": url})
    fs, path = fsspec.core.url_to_fs(url)
    try:
        api.run(cfg, tmp_path / "run", seed=1, quiet=True)
        index = json.loads(fs.cat(f"{path}/index.json"))
        assert index == json.loads((tmp_path / "run" / "answers" / "index.json").read_text())
        assert len(fs.ls(path)) == len(list((tmp_path / "run" / "answers").iterdir()))
    finally:
        if fs.exists(path):
            fs.rm(path, recursive=True)


def test_bad_output_destination_is_a_config_error(tmp_path):
    from privcube.config import load_config
    from privcube.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"output\.zarr"):
        load_config(_published_job(tmp_path, {"zarr": ["not", "a", "path"]}))


def test_zarr_holds_every_groups_estimate_and_variance(tmp_path):
    """store.zarr answers every query group like answers/*.parquet: ``group-NNNN-<label>.estimate`` and
    ``.variance`` in the Parquet's query order (the variances were missing, and non-marginal groups such as
    prefix or affine were not in zarr at all)."""
    import yaml

    from privcube import api
    from privcube.storage.zarr_store import TensorStore

    rng = np.random.default_rng(5)
    pd.DataFrame({"a": rng.integers(0, 3, 500), "b": rng.integers(0, 4, 500)}).to_parquet(tmp_path / "d.parquet")
    cfg = {"data": {"path": "d.parquet", "domain": {"a": 3, "b": 4}}, "mechanism": {"name": "querysmasher"},
           "workload": [{"attributes": ["b"]}, {"attributes": ["b"], "queries": "prefix"},
                        {"attributes": ["a", "b"], "queries": "affine"}, {"kway": 0}],
           "privacy": {"rho": 0.5}, "cluster": "threads"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    api.run(tmp_path / "job.yaml", tmp_path / "run", seed=2, quiet=True)
    store = TensorStore(tmp_path / "run" / "store.zarr", mode="r")
    index = json.loads((tmp_path / "run" / "answers" / "index.json").read_text())["groups"]
    stems = ["group-0000-b", "group-0001-b", "group-0002-a-b", "group-0003-total"]
    assert [g["file"] for g in index] == [s + ".parquet" for s in stems]
    for i, stem in enumerate(stems):
        table = pd.read_parquet(tmp_path / "run" / "answers" / f"{stem}.parquet")
        est, var = store.read(f"{stem}.estimate"), store.read(f"{stem}.variance")
        assert est.shape == var.shape == (len(table),)
        np.testing.assert_array_equal(est, table["estimate"].to_numpy())
        np.testing.assert_array_equal(var, table["variance"].to_numpy())
        assert store.attrs(f"{stem}.variance")["group"] == i and (var > 0).all()
    assert store.attrs("group-0001-b.estimate")["queries"] == {"b": "prefix"}
    # the prefix answers are post-processing of the same measurements: cumulative sums of b's cells
    np.testing.assert_allclose(store.read("group-0001-b.estimate"), np.cumsum(store.read("group-0000-b.estimate")))
    assert len(store.read("group-0002-a-b.estimate")) == 3 + 4 - 1  # a + b <= c, c = 0..5


def test_descriptions_over_bins_read_as_intervals():
    """Prefix and range queries over a binned numeric attribute are described by the interval they count
    (bins are half-open), not by bin labels ("age <= [18, 35)", "hours in [[0, 20), [20, 40)]"); a coded
    missing value (the last code) is named."""
    dom = Domain.from_mapping({"age": 4})
    labels = {"age": ["[0, 18)", "[18, 35)", "[35, 120)", "missing"]}
    prefix = group(dom, ["age"], "prefix")
    assert prefix.row_descriptions(dom, labels) == ["age < 18", "age < 35", "age < 120", "age < 120 or missing"]
    rng = group(dom, ["age"], {"type": "range", "width": 2})
    assert rng.row_descriptions(dom, labels) == ["age in [0, 35)", "age in [18, 120)", "age in [35, 120) or missing"]
    allr = group(dom, ["age"], "allrange")
    desc, m = allr.row_descriptions(dom, labels), allr.matrix(dom)
    assert desc[m.tolist().index([0, 1, 1, 0])] == "age in [18, 120)"
    assert desc[m.tolist().index([0, 0, 0, 1])] == "age in [missing, missing]"  # the missing code alone
    cats = {"age": ["a", "b", "c", "d"]}  # categories: unchanged
    assert prefix.row_descriptions(dom, cats)[1] == "age <= b" and allr.row_descriptions(dom, cats)[1] == "age in [a, b]"
