"""The real links of a benchmark data set as row positions (NON-private; for the floor baselines only).

``run_relational`` takes a link spec (a link table with ids, or a foreign key) and resolves it where the data
lives; the floor baselines need the real (i, j) row positions in memory, resolved here with pandas.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def _frame(data: Any) -> pd.DataFrame:
    """A pandas frame of a table (dask frames are computed)."""
    return data.compute() if hasattr(data, "compute") else data


def real_positions(ds: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """(tables as pandas, i, j): the real links as row positions of the left/child and right/parent tables."""
    tables = {n: (_frame(t), d) for n, (t, d) in ds["tables"].items()}
    spec = ds["links"]
    if "from" in spec:  # one-to-many: each child row links to its parent
        child, fk = spec["from"].split(".", 1)
        parent, key = spec["to"].split(".", 1)
        pos = pd.Series(np.arange(len(tables[parent][0])), index=tables[parent][0][key].to_numpy())
        j = pos.reindex(tables[child][0][fk].to_numpy()).to_numpy()
        if np.isnan(j.astype(float)).any():
            raise ValueError("a child row's foreign key is not among the parent keys")
        return tables, np.arange(len(j), dtype=np.int64), j.astype(np.int64)
    left, lkey = spec["left"].split(".", 1)
    right, rkey = spec["right"].split(".", 1)
    pairs = _frame(spec["pairs"])
    c1, c2 = spec.get("columns") or list(pairs.columns[:2])
    p1 = pd.Series(np.arange(len(tables[left][0])), index=tables[left][0][lkey].to_numpy())
    p2 = pd.Series(np.arange(len(tables[right][0])), index=tables[right][0][rkey].to_numpy())
    i = p1.reindex(pairs[c1].to_numpy()).to_numpy()
    j = p2.reindex(pairs[c2].to_numpy()).to_numpy()
    return tables, i.astype(np.int64), j.astype(np.int64)
