"""Relational runs out of core (#17): partitioned Parquet in, the real side counted where it lives.

A run over partitioned Parquet (dask frames, several partitions) equals the in-memory run bit for bit;
errors found in a later partition name the global row, on one line; on a LocalCluster the driver receives
no record-level real data (every object gathered from the workers is searched); the NON-private
evaluation's degree histogram and floor agree with direct computations.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.errors import DataError
from privcube.relational.stages.run import run_relational
from privcube.relational.stages.cross_workloads import cross_workloads
from privcube.privacy.noise import NoiseSource
from privcube.relational.example_data import movielens_like, parent_child_like

dd = pytest.importorskip("dask.dataframe")

FAST = {"iterations": 2, "pgd_iters": 20, "d_max": 10, "evaluate_nonprivate": True}
BUDGETS = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "movies": {"epsilon": 1.0, "delta": 1e-6}},
           "links": {"epsilon": 1.0, "delta": 1e-6}}


@pytest.fixture(scope="module")
def ml_ooc() -> dict:
    """A larger MovieLens-shaped set than conftest's ``ml``: enough rows to partition."""
    return movielens_like(n_users=150, n_movies=110, n_genres=4, d_max=10, seed=3)


def _partitioned(frame: pd.DataFrame, folder: Path, parts: int) -> Path:
    """``frame`` written as a directory of ``parts`` Parquet files (row order kept)."""
    dd.from_pandas(frame, npartitions=parts, sort=False).to_parquet(folder, write_index=False)
    return folder


def _lazy(ml_ooc: dict, tmp_path: Path) -> tuple[dict, dict]:
    tables = {n: (dd.read_parquet(_partitioned(f, tmp_path / n, 3)), dom) for n, (f, dom) in ml_ooc["tables"].items()}
    links = {**ml_ooc["links"], "pairs": dd.read_parquet(_partitioned(ml_ooc["links"]["pairs"], tmp_path / "pairs", 4))}
    return tables, links


def test_partitioned_parquet_equals_in_memory(ml_ooc: dict, tmp_path: Path) -> None:
    tables, links = _lazy(ml_ooc, tmp_path)
    assert links["pairs"].npartitions == 4 and tables["users"][0].npartitions == 3
    mem = run_relational(ml_ooc["tables"], ml_ooc["links"], FAST, BUDGETS, noise=NoiseSource(4))
    ooc = run_relational(tables, links, FAST, BUDGETS, noise=NoiseSource(4))
    assert ooc.links.equals(mem.links)
    for name in ("users", "movies"):
        pd.testing.assert_frame_equal(ooc.tables[name], mem.tables[name])
    a, b = mem.report["nonprivate_evaluation"], ooc.report["nonprivate_evaluation"]
    assert a["average_cross_error_pct"] == b["average_cross_error_pct"] and a["floor_pct"] == b["floor_pct"]
    assert mem.report["dp_cross_error"] == ooc.report["dp_cross_error"]


def test_nonprivate_evaluation_degrees_and_floor(ml_ooc: dict) -> None:
    """Degree histograms equal direct counts; with the real tables as 'synthetic' ones every record has a twin
    with its own codes, so the floor is exactly 0; per-workload errors cover every order-k workload."""
    identity = {n: v[0] for n, v in ml_ooc["tables"].items()}
    res = run_relational(ml_ooc["tables"], ml_ooc["links"], FAST, {"links": BUDGETS["links"]}, noise=NoiseSource(2),
                         synthetic_tables=identity)
    ev = res.report["nonprivate_evaluation"]
    assert "NOT differentially private" in ev["note"]
    assert ev["floor_pct"] == 0.0
    pairs = ml_ooc["links"]["pairs"]
    users, movies = ml_ooc["tables"]["users"][0], ml_ooc["tables"]["movies"][0]
    j = movies.set_index("id").index.get_indexer(pairs["movie_id"])
    i = users.set_index("id").index.get_indexer(pairs["user_id"])
    assert ev["degree_distribution"]["real"] == np.bincount(np.bincount(j, minlength=len(movies))).tolist()
    assert ev["left_degree_distribution"]["real"] == np.bincount(np.bincount(i, minlength=len(users))).tolist()
    syn_j = res.links.iloc[:, 1].to_numpy()
    assert ev["degree_distribution"]["synthetic"] == np.bincount(np.bincount(syn_j, minlength=len(movies))).tolist()
    doms = (ml_ooc["tables"]["users"][1], ml_ooc["tables"]["movies"][1])
    labels = {w.label() for w in cross_workloads(*doms, 3)}
    assert set(ev["per_workload_pct"]) == labels
    learned = np.mean([v["learned"] for v in ev["per_workload_pct"].values()])
    assert learned == pytest.approx(ev["average_cross_error_pct"], rel=1e-12)


def test_errors_in_a_later_partition_name_the_global_row_on_one_line(tmp_path: Path) -> None:
    pc = parent_child_like(n_parents=40, n_children=160, d_max=10, seed=1)
    children, cdom = pc["tables"]["children"]
    bad = children.copy()
    bad.loc[130, "parent_id"] = -99  # the 4th partition of 4 (rows 120..159)
    frame = dd.read_parquet(_partitioned(bad, tmp_path / "children", 4))
    tables = {**pc["tables"], "children": (frame, cdom)}
    with pytest.raises(DataError) as e:
        run_relational(tables, pc["links"], FAST, {"links": BUDGETS["links"]},
                       synthetic_tables={n: v[0] for n, v in pc["tables"].items()})
    msg = str(e.value)
    assert msg == "links: the children.parent_id value in row 130 is not a key of parents.id", msg
    dup = children.copy()
    parents, pdom = pc["tables"]["parents"]
    dup_parents = parents.copy()
    dup_parents.loc[33, "id"] = dup_parents.loc[2, "id"]
    pframe = dd.read_parquet(_partitioned(dup_parents, tmp_path / "parents", 3))
    with pytest.raises(DataError) as e:
        run_relational({"children": (dup, cdom), "parents": (pframe, pdom)}, pc["links"], FAST,
                       {"links": BUDGETS["links"]}, synthetic_tables={n: v[0] for n, v in pc["tables"].items()})
    msg = str(e.value)
    assert msg == "table 'parents': key column 'id' repeats a value (row 33); keys must be unique", msg
    over = {**FAST, "d_max": 2}
    with pytest.raises(DataError) as e:
        run_relational({"children": (dd.read_parquet(_partitioned(children, tmp_path / "good", 4)), cdom),
                        "parents": pc["tables"]["parents"]}, pc["links"], over,
                       {"links": BUDGETS["links"]}, synthetic_tables={n: v[0] for n, v in pc["tables"].items()})
    msg = str(e.value)
    assert "d_max=2" in msg and "\n" not in msg
    assert [int(x) for x in __import__("re").findall(r"\d+", msg)] == [2], msg  # no degree, no id


def _arrays_in(obj, depth: int = 0) -> list:  # noqa: ANN001
    """Every array-like (numpy, pandas) inside an object received from the workers."""
    if depth > 6:
        return []
    if isinstance(obj, (np.ndarray, pd.Series, pd.DataFrame, pd.Index)):
        return [obj] if np.ndim(obj) >= 1 else []
    if isinstance(obj, dict):
        return [a for v in obj.values() for a in _arrays_in(v, depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [a for v in obj for a in _arrays_in(v, depth + 1)]
    return []


def test_driver_receives_no_record_level_real_data(two_worker_client, ml_ooc: dict, tmp_path: Path, gathered: list) -> None:
    """On a LocalCluster, everything the client gathers is searched: no array (or frame) as long as a real
    table or the real link table; what comes back is sizes, histograms, count tables and synthetic data."""
    from privcube.graphs.execution import run_context

    tables, links = _lazy(ml_ooc, tmp_path)
    n1, n2, m = len(ml_ooc["tables"]["users"][0]), len(ml_ooc["tables"]["movies"][0]), len(ml_ooc["links"]["pairs"])
    params = {**FAST, "synthetic_rows": {"users": 97, "movies": 83}, "m_syn": 301, "chunk_size": 40}
    received = gathered  # from here on (conftest's `gathered` records every gather)
    received.clear()
    client = two_worker_client
    res = run_relational(tables, links, params, BUDGETS, noise=NoiseSource(6), context=run_context(client))
    assert len(res.links) == 301 and len(res.tables["users"]) == 97
    arrays = [a for r in received for a in _arrays_in(r)]
    assert arrays, "nothing was gathered: the positive control below would be vacuous"
    lengths = {len(a) for a in arrays}
    assert not lengths & {n1, n2, m}, sorted(lengths)
    assert not any(isinstance(a, (pd.DataFrame, pd.Index)) and len(a) > 0 and
                   set(map(str, getattr(a, "columns", []))) & {"user_id", "movie_id", "id"} for a in arrays)
    # positive control: the search does catch a gathered real column
    assert {len(a) for a in _arrays_in([ml_ooc["links"]["pairs"]["user_id"].to_numpy()])} & {m}


def test_job_over_partitioned_parquet_directories(ml_ooc: dict, tmp_path: Path) -> None:
    """A relational job config whose tables and link table are partitioned Parquet directories runs through the
    Python API and equals the run over single Parquet files (seeded)."""
    import privcube

    for layout, parts in (("files", 1), ("dirs", 3)):
        d = tmp_path / layout
        d.mkdir()
        for n, (f, _) in ml_ooc["tables"].items():
            _partitioned(f, d / n, parts) if parts > 1 else f.to_parquet(d / f"{n}.parquet", index=False)
        pairs = ml_ooc["links"]["pairs"]
        _partitioned(pairs, d / "pairs", parts) if parts > 1 else pairs.to_parquet(d / "pairs.parquet", index=False)
    results = {}
    for layout, suffix in (("files", ".parquet"), ("dirs", "")):
        d = tmp_path / layout
        doms = {n: dict(zip(dom.attributes, map(int, dom.shape))) for n, (_, dom) in ml_ooc["tables"].items()}
        cfg = {"data": {"tables": {n: {"path": str(d / f"{n}{suffix}"), "domain": doms[n], "key": "id"}
                                   for n in ml_ooc["tables"]},
                        "links": {"path": str(d / f"pairs{suffix}"), "left": "users.id", "right": "movies.id",
                                  "columns": ["user_id", "movie_id"]}},
               "mechanism": {"name": "relational", **FAST},
               "privacy": BUDGETS, "cluster": "threads"}
        results[layout] = privcube.run(cfg, out=tmp_path / f"run-{layout}", seed=5, quiet=True)
    for name in ("users", "movies", "links"):
        a = pd.read_parquet(tmp_path / "run-files" / "synthetic" / f"{name}.parquet")
        b = pd.read_parquet(tmp_path / "run-dirs" / "synthetic" / f"{name}.parquet")
        pd.testing.assert_frame_equal(a, b)
    rep = json.loads((tmp_path / "run-dirs" / "report.json").read_text())
    ev = rep["nonprivate_evaluation"]  # top level, labelled NON-PRIVATE
    assert ev["floor_pct"] >= 0 and ev["initial_random_links_error_pct"] > 0
