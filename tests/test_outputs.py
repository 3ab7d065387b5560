"""Run directory: owner-only, atomic writes, refuses finished runs, tidy answer tables."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pandas as pd
import pytest

from privcube.domain import Domain
from privcube.errors import RunDirectoryError
from privcube.mechanisms.base import GroupAnswer
from privcube.storage.outputs import RunDirectory, answer_frame
from privcube.workload import Workload, group


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
    assert list(t0.columns) == ["a", "b", "estimate", "variance"]
    # C order over (a, b): row r is cell (r // 3, r % 3)
    assert t0["a"].tolist() == [0, 0, 0, 1, 1, 1] and t0["b"].tolist() == [0, 1, 2, 0, 1, 2]
    assert t0["estimate"].tolist() == est_ab.tolist()
    t1 = pd.read_parquet(folder / index[1]["file"])
    assert list(t1.columns) == ["query", "estimate"]


def test_answer_frame_rejects_wrong_size():
    dom = Domain.from_mapping({"a": 2, "b": 3})
    g = group(dom, ["a", "b"])
    with pytest.raises(ValueError, match="5 estimates for 6 cells"):
        answer_frame(GroupAnswer(g, np.zeros(5)), dom)
