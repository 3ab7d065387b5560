"""Independent reference counts for marginal tests (pandas groupby, not the engine)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def groupby_dense(df: pd.DataFrame, clique: tuple[str, ...], shape: tuple[int, ...],
                  weight: str | None = None) -> np.ndarray:
    """Independent reference: pandas groupby counts scattered into a dense array."""
    out = np.zeros(shape, dtype=np.int64)
    if not clique:
        out[()] = len(df) if weight is None else int(df[weight].sum())
        return out
    g = df.groupby(list(clique), observed=True)
    counts = g.size() if weight is None else g[weight].sum()
    idx = counts.index
    if len(clique) == 1:
        out[idx.to_numpy()] = counts.to_numpy()
    else:
        out[tuple(idx.get_level_values(i).to_numpy() for i in range(len(clique)))] = counts.to_numpy()
    return out
