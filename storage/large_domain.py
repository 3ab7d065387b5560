"""A seeded table with large public domains and real dependence, for estimation benchmarks (issue 32).

Nine integer-coded attributes of the shape of a held-back real table: one of 501 values (an occupation
code, nested in industries), one of 76 (an industry), five of 33 (binned numeric quantities in a chain of
dependence, with spikes such as zero income and a 40-hour week) and two of 3. A latent segment drives
industry, age, class and sex, so every 3-way marginal is sparse and structured, as census extracts are.
The population tables are fixed (``_STRUCTURE_SEED``); the data seed only draws the rows.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from privcube.core.errors import ConfigError

#: attribute -> public domain size, in column order
LARGE_DOMAIN = {"occupation": 501, "industry": 76, "age": 33, "education": 33, "hours": 33, "income": 33,
                "tenure": 33, "class": 3, "sex": 3}
_STRUCTURE_SEED = 20261127
_SEGMENTS = 12


def _zipf(k: int, a: float, rng: np.random.Generator) -> np.ndarray:
    """A Zipf-shaped distribution over ``k`` values in a random order."""
    p = 1.0 / np.arange(1, k + 1) ** a
    return rng.permutation(p / p.sum())


def _ordinal(mean: np.ndarray, sd: float, k: int = 33) -> np.ndarray:
    """Rows of discretised normal distributions over 0..k-1 (one row per mean)."""
    grid = np.arange(k)
    p = np.exp(-0.5 * ((grid[None, :] - np.asarray(mean, float)[:, None]) / sd) ** 2) + 1e-4
    return p / p.sum(axis=1, keepdims=True)


@lru_cache(maxsize=1)
def _tables() -> dict[str, np.ndarray]:
    """The fixed conditional probability tables (rows sum to one)."""
    rng = np.random.default_rng(_STRUCTURE_SEED)
    seg = np.arange(_SEGMENTS)
    t: dict[str, np.ndarray] = {"segment": _zipf(_SEGMENTS, 0.8, rng)}
    t["class|segment"] = rng.dirichlet(np.full(3, 0.6), _SEGMENTS)
    t["sex|segment"] = rng.dirichlet(np.full(3, 2.0), _SEGMENTS) * 0.98 + np.array([0, 0, 0.02])
    t["sex|segment"] /= t["sex|segment"].sum(axis=1, keepdims=True)
    t["industry|segment"] = np.stack([_zipf(76, 1.3, rng) for _ in seg])
    # occupations nest in industries: each industry draws from ~40 of the 501 codes, 5 % from all of them
    occ = np.zeros((76, 501))
    glob = _zipf(501, 1.05, rng)
    for i in range(76):
        own = rng.choice(501, 40, replace=False)
        occ[i, own] = _zipf(40, 1.2, rng)
        occ[i] = 0.95 * occ[i] + 0.05 * glob
    t["occupation|industry"] = occ
    t["age|segment"] = _ordinal(4 + 24 * rng.random(_SEGMENTS), 4.0)
    t["education|age"] = _ordinal(6 + 0.55 * np.arange(33), 3.5)
    hours = _ordinal(np.repeat([8.0, 16.0, 20.0], 3) + np.tile([0.0, 2.0, -3.0], 3), 3.0)  # class x sex
    hours[:, 16] += 0.35  # the 40-hour week
    hours[:, 0] += 0.08  # no hours
    t["hours|class,sex"] = hours / hours.sum(axis=1, keepdims=True)
    inc = _ordinal((0.5 * np.arange(33)[:, None] + 0.45 * np.arange(33)[None, :]).ravel(), 3.0)  # educ x hours
    inc[:, 0] += 0.4  # no income
    t["income|education,hours"] = inc / inc.sum(axis=1, keepdims=True)
    t["tenure|age"] = _ordinal(0.7 * np.arange(33), 2.5)
    return t


def _draw(rng: np.random.Generator, table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """One code per row from the conditional distributions ``table[rows]`` (inverse CDF)."""
    cdf = np.cumsum(table, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(len(rows))
    return (u[:, None] > cdf[rows]).sum(axis=1) if table.shape[1] <= 64 else _search(cdf, rows, u)


def _search(cdf: np.ndarray, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF for wide tables, row group by row group (bounded memory)."""
    out = np.empty(len(rows), dtype=np.int64)
    for r in np.unique(rows):
        at = rows == r
        out[at] = np.searchsorted(cdf[r], u[at], side="right")
    return np.minimum(out, cdf.shape[1] - 1)


def generate_large_domain(n_rows: int = 140_000, seed: int = 0) -> pd.DataFrame:
    """``n_rows`` records over :data:`LARGE_DOMAIN` (codes), drawn from the fixed tables with ``seed``."""
    if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 1:
        raise ConfigError(f"n_rows={n_rows!r} must be a positive integer")
    t = _tables()
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(32,)))
    seg = rng.choice(_SEGMENTS, n_rows, p=t["segment"])
    cls = _draw(rng, t["class|segment"], seg)
    sex = _draw(rng, t["sex|segment"], seg)
    ind = _draw(rng, t["industry|segment"], seg)
    occ = _draw(rng, t["occupation|industry"], ind)
    age = _draw(rng, t["age|segment"], seg)
    edu = _draw(rng, t["education|age"], age)
    hrs = _draw(rng, t["hours|class,sex"], cls * 3 + sex)
    inc = _draw(rng, t["income|education,hours"], edu * 33 + hrs)
    ten = _draw(rng, t["tenure|age"], age)
    cols = {"occupation": occ, "industry": ind, "age": age, "education": edu, "hours": hrs, "income": inc,
            "tenure": ten, "class": cls, "sex": sex}
    return pd.DataFrame({k: np.asarray(v, dtype=np.int16) for k, v in cols.items()})


def write_large_domain(out_dir: str | Path, n_rows: int = 140_000, seed: int = 0) -> tuple[Path, Path]:
    """Write ``large-domain.parquet`` and ``large-domain-domain.json`` into ``out_dir``; return both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data, dom = out / "large-domain.parquet", out / "large-domain-domain.json"
    generate_large_domain(n_rows, seed).to_parquet(data, index=False)
    dom.write_text(json.dumps(LARGE_DOMAIN))
    return data, dom


__all__ = ["LARGE_DOMAIN", "generate_large_domain", "write_large_domain"]
