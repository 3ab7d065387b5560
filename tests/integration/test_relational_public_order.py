"""A public table of a schema graph stays public but unlinkable (issue 36, item 4): its real rows are released
in an order, and under keys, that depend only on the multiset of its rows and the run's noise, never on which
input row was where."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

import privcube

from relational_files import _files  # noqa: E402


def _run(cfg: dict, folder: Path, name: str, seed: int) -> Path:
    (folder / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    privcube.run(folder / "cfg.yaml", folder / name, seed=seed, quiet=True)
    return folder / name


def test_public_parent_order_and_keys_tell_nothing_about_the_input_rows(tmp_path: Path) -> None:
    """The same public users given in two different row orders (and under other ids) give byte-identical
    outputs under one seed: a synthetic user's position and key are functions of the multiset of rows and the
    noise alone. The output is not the input's order, and another seed gives another order of the same rows."""
    cfg = _files(tmp_path)
    cfg["privacy"]["tables"]["users"] = "public"
    a = _run(cfg, tmp_path, "a", seed=4)
    users = pd.read_parquet(tmp_path / "users.parquet")
    perm = np.random.default_rng(99).permutation(len(users))
    sess = pd.read_parquet(tmp_path / "sessions.parquet")
    book = pd.read_parquet(tmp_path / "bookings.parquet")
    new_id = {old: f"x{k:03d}" for k, old in enumerate(users["id"].iloc[perm])}  # other keys, other order
    users.iloc[perm].assign(id=lambda t: t["id"].map(new_id)).to_parquet(tmp_path / "users.parquet")
    sess.assign(user_id=sess["user_id"].map(new_id)).to_parquet(tmp_path / "sessions.parquet")
    book.assign(user_id=book["user_id"].map(new_id)).to_parquet(tmp_path / "bookings.parquet")
    b = _run(cfg, tmp_path, "b", seed=4)
    for name in ("users", "sessions", "bookings"):
        pd.testing.assert_frame_equal(pd.read_parquet(a / f"synthetic/{name}.parquet"),
                                      pd.read_parquet(b / f"synthetic/{name}.parquet"))
    out = pd.read_parquet(a / "synthetic/users.parquet")
    real = users.iloc[np.argsort(perm)][["age", "region"]].to_numpy()  # back to the first run's input order
    assert sorted(map(tuple, out[["age", "region"]].to_numpy())) == sorted(map(tuple, real))  # the same rows
    assert not (out[["age", "region"]].to_numpy() == real).all()  # not in the input's order
    c = pd.read_parquet(_run(cfg, tmp_path, "c", seed=5) / "synthetic/users.parquet")
    assert not (c[["age", "region"]].to_numpy() == out[["age", "region"]].to_numpy()).all()
    note = json.loads((a / "report.json").read_text())["tables"]["users"]["note"]
    assert "random order" in note and "neither a row's position nor its key" in note
