"""Seeded, partitioned, census-like synthetic data (integer-coded Parquet) for tests and benchmarks.

Rows are drawn attribute by attribute from fixed conditional probability tables (age -> marital
status, education, income, hours, ...), so the data has realistic skew and correlations. File ``i``
depends only on ``(seed, i)`` (its generator is ``SeedSequence(seed, spawn_key=(i,))``, the same as
``SeedSequence(seed).spawn(n)[i]``, with one child stream per attribute), so files can be generated independently, in parallel, in
O(rows_per_file) memory.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.storage.schema import Attribute, Schema, code_dtype

MAX_ATTRIBUTES = 30
_STRUCTURE_SEED = 20240607  # fixes the conditional tables; the data seed only drives sampling

AGE_EDGES = [15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 100]
HOURS_EDGES = [0, 10, 20, 30, 35, 40, 45, 50, 60, 80, 100]
INCOME_EDGES = [0, 10_000, 20_000, 30_000, 40_000, 50_000, 75_000, 100_000, 150_000, 200_000, 1_000_000]
SIGNUP_EDGES = [f"{y}-01-01" for y in range(2010, 2022)]

_STATES = (
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ "
    "NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY"
).split()


def _ranges(edges: Sequence[float]) -> list[str]:
    """Bin labels "[a, b)" for consecutive edges."""
    return [f"[{a}, {b})" for a, b in zip(edges, edges[1:])]


@dataclass(frozen=True)
class _Spec:
    """One generated attribute: labels, parents and how its conditional table is built."""

    name: str
    labels: tuple[str, ...]
    parents: tuple[str, ...] = ()
    base: tuple[float, ...] | None = None  # marginal shape before tilting (skew)
    strength: float = 2.0  # how strongly the parents tilt the child
    ordinal: bool = False  # child codes are ordered (tilt moves mass up/down the scale)
    custom: Callable[[np.ndarray], np.ndarray] | None = None  # parent codes grid -> probabilities


def _zipf(k: int, a: float = 1.1) -> tuple[float, ...]:
    """Skewed base distribution over ``k`` values."""
    w = 1.0 / np.arange(1, k + 1) ** a
    return tuple(w / w.sum())


def _marital_given_age(age: np.ndarray) -> np.ndarray:
    """P(marital | age bin): never-married falls with age, widowed rises late, divorced mid-life."""
    mid = (np.asarray(AGE_EDGES[:-1]) + np.asarray(AGE_EDGES[1:])) / 2.0
    a = mid[age[:, 0]]
    never = 0.03 + 0.97 * np.exp(-np.maximum(a - 17.0, 0) / 9.0)
    married = 0.62 / (1 + np.exp(-(a - 28.0) / 4.0)) * np.exp(-np.maximum(a - 70, 0) / 15.0)
    divorced = 0.16 * np.exp(-((a - 52.0) / 14.0) ** 2)
    separated = 0.04 * np.exp(-((a - 40.0) / 12.0) ** 2)
    widowed = 0.6 / (1 + np.exp(-(a - 77.0) / 6.0))
    return np.stack([never, married, divorced, separated, widowed], axis=1)


def _relationship_given(grid: np.ndarray) -> np.ndarray:
    """P(relationship | marital, sex): married men are husbands, married women wives."""
    marital, sex = grid[:, 0], grid[:, 1]
    p = np.full((len(grid), 6), 0.02)
    married = marital == 1
    p[married & (sex == 1), 0] = 0.92  # Husband
    p[married & (sex == 0), 1] = 0.90  # Wife
    single = marital == 0
    p[single, 2] = 0.55  # Own-child
    p[single, 3] = 0.35
    other = ~married & ~single
    p[other, 3] = 0.50  # Not-in-family
    p[other, 5] = 0.40  # Unmarried
    p[:, 4] += 0.03
    return p


def _state_given_region(grid: np.ndarray) -> np.ndarray:
    """P(state | region): each state belongs to one region (state s is in region s mod 9)."""
    region = grid[:, 0]
    member = (np.arange(len(_STATES))[None, :] % 9) == region[:, None]
    weight = np.asarray(_zipf(len(_STATES), 0.7))[None, :]
    return np.where(member, weight, 0.0)


def _birthplace_given_citizenship(grid: np.ndarray) -> np.ndarray:
    """P(birthplace | citizenship): the US-born are born in the US (code 0), others abroad."""
    cit = grid[:, 0]
    k = 60
    abroad = np.asarray(_zipf(k - 1, 1.0))
    p = np.zeros((len(grid), k))
    born_us = cit == 0
    p[born_us, 0] = 1.0
    p[~born_us, 1:] = abroad
    p[cit == 2, 0] = 0.3  # born abroad of US parents: some recorded as US
    return p


def _fertility_given(grid: np.ndarray) -> np.ndarray:
    """P(birth last year | age, sex): only women of 15-45 have a noticeable rate."""
    age, sex = grid[:, 0], grid[:, 1]
    lo = np.asarray(AGE_EDGES[:-1])[age]
    rate = np.where((sex == 0) & (lo >= 15) & (lo < 45), 0.02 + 0.1 * np.exp(-((lo - 28) / 7.0) ** 2), 0.0005)
    return np.stack([1 - rate, rate], axis=1)


def _specs() -> list[_Spec]:
    """All 30 census-like attributes, parents always before children."""
    edu = ("Preschool 1st-4th 5th-6th 7th-8th 9th 10th 11th 12th HS-grad Some-college Assoc-voc "
           "Assoc-acdm Bachelors Masters Prof-school Doctorate").split()
    return [
        _Spec("age", tuple(_ranges(AGE_EDGES)),
              base=(.08, .085, .085, .085, .08, .08, .08, .08, .075, .07, .06, .045, .035, .025, .015, .01)),
        _Spec("sex", ("Female", "Male"), base=(0.51, 0.49)),
        _Spec("race", ("White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"),
              base=(0.72, 0.13, 0.07, 0.01, 0.07)),
        _Spec("region", ("New-England", "Mid-Atlantic", "East-North-Central", "West-North-Central",
                         "South-Atlantic", "East-South-Central", "West-South-Central", "Mountain",
                         "Pacific"), ("race",), base=(.05, .13, .14, .07, .2, .06, .12, .08, .15),
              strength=1.5),
        _Spec("marital_status", ("Never-married", "Married", "Divorced", "Separated", "Widowed"),
              ("age",), custom=_marital_given_age),
        _Spec("education", tuple(edu), ("age", "race"),
              base=(.002, .005, .01, .02, .015, .03, .035, .013, .32, .22, .042, .033, .165, .055, .018, .017),
              strength=2.0, ordinal=True),
        _Spec("workclass", ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                            "State-gov", "Without-pay", "Never-worked"), ("age", "education"),
              base=(.70, .08, .035, .03, .065, .04, .005, .045), strength=2.0),
        _Spec("occupation", ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                             "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                             "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                             "Armed-Forces"), ("education", "sex"), base=_zipf(14, 0.6), strength=3.0),
        _Spec("hours_per_week", tuple(_ranges(HOURS_EDGES)), ("age", "sex", "workclass"),
              base=(.03, .05, .07, .06, .45, .1, .1, .08, .05, .01), strength=2.0, ordinal=True),
        _Spec("income", tuple(_ranges(INCOME_EDGES)), ("education", "age", "hours_per_week"),
              base=(.12, .12, .12, .11, .1, .15, .1, .09, .05, .04), strength=4.0, ordinal=True),
        _Spec("relationship", ("Husband", "Wife", "Own-child", "Not-in-family", "Other-relative",
                               "Unmarried"), ("marital_status", "sex"), custom=_relationship_given),
        _Spec("household_size", ("1", "2", "3", "4", "5", "6", "7+"), ("marital_status", "age"),
              base=(.28, .34, .15, .13, .06, .025, .015), strength=2.0, ordinal=True),
        _Spec("citizenship", ("Born-US", "Born-territories", "Born-abroad-US-parents", "Naturalized",
                              "Not-citizen"), ("race", "region"), base=(.86, .01, .01, .07, .05),
              strength=2.5),
        _Spec("language", tuple(f"lang_{i:02d}" for i in range(12)), ("citizenship",),
              base=_zipf(12, 2.0), strength=3.0),
        _Spec("state", tuple(_STATES), ("region",), custom=_state_given_region),
        _Spec("county_type", ("Urban", "Suburban", "Rural"), ("region",), base=(.3, .5, .2)),
        _Spec("tenure", ("Owned", "Rented", "Other"), ("age", "income"), base=(.64, .33, .03),
              strength=2.5, ordinal=True),
        _Spec("vehicles", ("0", "1", "2", "3", "4+"), ("tenure", "household_size"),
              base=(.08, .33, .37, .15, .07), strength=2.0, ordinal=True),
        _Spec("disability", ("No", "Yes"), ("age",), base=(.87, .13), strength=3.0, ordinal=True),
        _Spec("veteran", ("No", "Yes"), ("age", "sex"), base=(.93, .07), strength=3.0, ordinal=True),
        _Spec("health_insurance", ("Private", "Public", "Both", "None"), ("income", "age"),
              base=(.55, .2, .15, .1), strength=2.5),
        _Spec("commute_mode", ("Drove-alone", "Carpool", "Transit", "Walk", "Other", "Work-from-home"),
              ("county_type", "workclass"), base=(.75, .09, .05, .03, .02, .06), strength=2.0),
        _Spec("commute_time", tuple(_ranges([0, 5, 10, 15, 20, 25, 30, 35, 45, 60, 90, 120, 200])),
              ("commute_mode",), base=(.03, .12, .14, .15, .14, .06, .12, .04, .09, .06, .03, .02),
              strength=2.5, ordinal=True),
        _Spec("industry", tuple(f"industry_{i:02d}" for i in range(20)), ("occupation",),
              base=_zipf(20, 0.8), strength=4.0),
        _Spec("birthplace", ("US",) + tuple(f"country_{i:02d}" for i in range(1, 60)), ("citizenship",),
              custom=_birthplace_given_citizenship),
        _Spec("ancestry", tuple(f"ancestry_{i:03d}" for i in range(100)), ("birthplace",),
              base=_zipf(100, 1.0), strength=4.0),
        _Spec("children", ("0", "1", "2", "3", "4", "5+"), ("age", "marital_status"),
              base=(.6, .17, .14, .06, .02, .01), strength=2.0, ordinal=True),
        _Spec("internet", ("Broadband", "Cellular-only", "None"), ("income", "age"),
              base=(.78, .12, .10), strength=2.5, ordinal=True),
        _Spec("school_enrollment", ("Not-enrolled", "Public", "Private", "College"), ("age",),
              base=(.75, .08, .02, .15), strength=4.0),
        _Spec("fertility", ("No", "Yes"), ("age", "sex"), custom=_fertility_given),
    ]


@dataclass(frozen=True)
class _Table:
    """A compiled conditional table: parent positions, parent strides and global cumulative edges."""

    name: str
    size: int
    parents: tuple[int, ...]
    strides: tuple[int, ...]
    prob: np.ndarray  # alias-method acceptance probabilities, shape (rows * size,)
    alias: np.ndarray  # alias-method alternatives, shape (rows * size,)


def _alias_tables(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose alias tables for each row of ``p`` (O(1) vectorised sampling per draw)."""
    rows, k = p.shape
    prob = np.ones((rows, k))
    alias = np.tile(np.arange(k), (rows, 1))
    for r in range(rows):
        scaled = p[r] * k
        small = [i for i in range(k) if scaled[i] < 1.0]
        large = [i for i in range(k) if scaled[i] >= 1.0]
        while small and large:
            s, g = small.pop(), large.pop()
            prob[r, s], alias[r, s] = scaled[s], g
            scaled[g] -= 1.0 - scaled[s]
            (small if scaled[g] < 1.0 else large).append(g)
    return prob.ravel(), alias.ravel()


def _compile(specs: list[_Spec]) -> list[_Table]:
    """Turn the specs into sampling tables (deterministic: fixed structure seed)."""
    rng = np.random.default_rng(_STRUCTURE_SEED)
    index = {s.name: i for i, s in enumerate(specs)}
    sizes = [len(s.labels) for s in specs]
    # each attribute's "position" of its codes when it acts as a parent (ordinal -> its scale)
    scores = []
    for s, k in zip(specs, sizes):
        ordered = s.ordinal or s.name in ("age", "education", "income", "hours_per_week")
        scores.append(np.linspace(0.0, 1.0, k) if ordered and k > 1 else rng.random(k))
    tables = []
    for s, k in zip(specs, sizes):
        pidx = tuple(index[p] for p in s.parents)
        psizes = [sizes[j] for j in pidx]
        rows = math.prod(psizes)
        grid = np.stack(np.unravel_index(np.arange(rows), psizes), axis=1) if psizes else np.zeros((1, 0), int)
        if s.custom is not None:
            p = np.asarray(s.custom(grid), dtype=np.float64)
        else:
            base = np.asarray(s.base if s.base is not None else np.full(k, 1.0 / k), dtype=np.float64)
            if len(base) != k:
                raise AssertionError(f"spec {s.name!r}: base has {len(base)} entries for {k} labels")
            cpos = np.linspace(0.0, 1.0, k) if s.ordinal else rng.random(k)
            if psizes:
                weights = rng.uniform(0.6, 1.0, len(psizes))
                score = sum(w * scores[j][grid[:, c]] for c, (w, j) in enumerate(zip(weights, pidx)))
                score = score / weights.sum()
                tilt = np.exp(s.strength * 4.0 * (score[:, None] - 0.5) * (cpos[None, :] - 0.5) * 2.0)
            else:
                tilt = np.ones((1, k))
            jitter = rng.lognormal(0.0, 0.15, size=(rows, k)) if psizes else 1.0
            p = base[None, :] * tilt * jitter
        p = p / p.sum(axis=1, keepdims=True)
        strides = tuple(int(math.prod(psizes[c + 1:])) for c in range(len(psizes)))
        prob, alias = _alias_tables(p)
        tables.append(_Table(s.name, k, pidx, strides, prob, alias.astype(code_dtype(k))))
    return tables


@lru_cache(maxsize=1)
def _model() -> tuple[list[_Spec], list[_Table]]:
    """Specs and compiled tables, built once per process."""
    specs = _specs()
    return specs, _compile(specs)


def check_n_attributes(n_attributes: int) -> None:
    """Reject attribute counts the generator cannot produce."""
    if isinstance(n_attributes, bool) or not isinstance(n_attributes, int) or not 1 <= n_attributes <= MAX_ATTRIBUTES:
        raise ConfigError(f"n_attributes={n_attributes!r} must be an integer in 1..{MAX_ATTRIBUTES}")


def census_schema(n_attributes: int = 12) -> Schema:
    """Rich schema (integer codes with labels) of the first ``n_attributes`` census attributes."""
    check_n_attributes(n_attributes)
    specs, _ = _model()
    return Schema(tuple(Attribute(s.name, "integer", len(s.labels), labels_=s.labels) for s in specs[:n_attributes]))


def _alias_draw(t: _Table, row: np.ndarray | None, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` codes of table ``t`` (alias method), row ``i`` drawn given the parents' flat index ``row[i]``."""
    x = rng.random(n) * t.size
    k = x.astype(np.int64)
    np.minimum(k, t.size - 1, out=k)
    flat = row * t.size + k if t.parents else k
    accept = (x - k) < t.prob[flat]
    return np.where(accept, k, t.alias[flat])


@dataclass(frozen=True)
class Tilt:
    """A per-row reweighting of one attribute's conditional table: row ``i`` draws code ``k`` with probability
    proportional to ``P(k | parents) * accept[group[i], k]`` (rejection sampling; ``accept`` in (0, 1], each row
    of it with a 1 somewhere). The geography-aware generator uses it to shift tables by state, county and tract."""

    group: np.ndarray  # (n_rows,) index into the rows of ``accept``
    accept: np.ndarray  # (groups, size) acceptance probabilities


_REJECTION_ROUNDS = 3  # then the rows still rejected (those whose likely codes are tilted away) are drawn exactly
_PROBABILITIES: dict[str, np.ndarray] = {}


def _probabilities(t: _Table) -> np.ndarray:
    """``P(code | parents' flat index)`` of a compiled table, rebuilt from its alias tables: (rows, size)."""
    if t.name not in _PROBABILITIES:
        k = t.size
        prob, alias = t.prob.reshape(-1, k), t.alias.reshape(-1, k).astype(np.int64)
        p = prob.copy()
        np.add.at(p, (np.repeat(np.arange(len(prob)), k), alias.ravel()), (1.0 - prob).ravel())
        _PROBABILITIES[t.name] = p / k
    return _PROBABILITIES[t.name]


def _tilted(t: _Table, row: np.ndarray, rng: np.random.Generator, n: int, tilt: Tilt) -> np.ndarray:
    """Codes of ``t`` drawn under ``tilt``: draw, keep with probability ``accept[group, code]``, redraw the rest a
    few rounds, then draw the rows still rejected from their reweighted rows by inverse CDF (exact either way)."""
    codes = _alias_draw(t, row, rng, n)
    accept = tilt.accept.ravel()
    todo = np.flatnonzero(rng.random(n) >= accept[tilt.group * t.size + codes])
    for _ in range(_REJECTION_ROUNDS):
        if not todo.size:
            return codes
        codes[todo] = _alias_draw(t, row[todo], rng, todo.size)
        todo = todo[rng.random(todo.size) >= accept[tilt.group[todo] * t.size + codes[todo]]]
    if not todo.size:
        return codes
    weight = _probabilities(t)[row[todo] if t.parents else np.zeros(todo.size, np.int64)]
    cdf = np.cumsum(weight * tilt.accept[tilt.group[todo]], axis=1)
    u = rng.random(todo.size) * cdf[:, -1]
    codes[todo] = np.minimum((cdf <= u[:, None]).sum(axis=1), t.size - 1)
    return codes


def draw_codes(streams: Sequence[np.random.SeedSequence], n_rows: int, n_attributes: int, *,
               fixed: Mapping[str, np.ndarray] | None = None,
               tilts: Mapping[str, Tilt] | None = None) -> dict[str, np.ndarray]:
    """Codes of the first ``n_attributes`` attributes, one random stream each (a prefix of a longer draw).

    ``fixed`` supplies an attribute's codes instead of drawing them (its children are drawn given them);
    ``tilts`` reweights an attribute's table row by row (:class:`Tilt`). Without either, this is the flat
    generator's draw (:func:`generate_part`)."""
    _, tables = _model()
    fixed, tilts = fixed or {}, tilts or {}
    codes: list[np.ndarray] = []
    for t, child in zip(tables[:n_attributes], streams):
        if t.name in fixed:
            codes.append(np.asarray(fixed[t.name]).astype(code_dtype(t.size), copy=False))
            continue
        rng = np.random.default_rng(child)  # one stream per attribute: shorter parts are prefixes
        row = np.zeros(n_rows, dtype=np.int64)
        for j, stride in zip(t.parents, t.strides):
            row += codes[j].astype(np.int64) * stride
        drawn = _tilted(t, row, rng, n_rows, tilts[t.name]) if t.name in tilts else _alias_draw(t, row, rng, n_rows)
        codes.append(drawn.astype(code_dtype(t.size)))
    return {t.name: c for t, c in zip(tables, codes)}


def generate_part(index: int, n_rows: int, *, seed: int = 0, n_attributes: int = 12) -> pd.DataFrame:
    """Rows of file ``index`` (depends only on ``(seed, index)``; a prefix of a longer part)."""
    check_n_attributes(n_attributes)
    if n_rows < 0:
        raise ConfigError(f"n_rows={n_rows!r} must be >= 0")
    part = np.random.SeedSequence(seed, spawn_key=(int(index),))
    return pd.DataFrame(draw_codes(part.spawn(n_attributes), n_rows, n_attributes), copy=False)


def write_part(path: Path, frame: pd.DataFrame) -> Path:
    """Write one Parquet file atomically (temporary name, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp, compression="snappy")
    os.replace(tmp, path)
    return path


def generate_census(
    out_dir: str | Path,
    n_rows: int,
    *,
    seed: int = 0,
    rows_per_file: int = 1_000_000,
    n_attributes: int = 12,
    overwrite: bool = False,
    workers: int = 1,
) -> tuple[list[Path], Domain]:
    """Write ``out_dir/part-XXXXX.parquet`` + ``domain.json`` + ``schema.yaml``; return files and domain."""
    check_n_attributes(n_attributes)
    if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 1:
        raise ConfigError(f"n_rows={n_rows!r} must be a positive integer")
    if isinstance(rows_per_file, bool) or not isinstance(rows_per_file, int) or rows_per_file < 1:
        raise ConfigError(f"rows_per_file={rows_per_file!r} must be a positive integer")
    if workers < 1:
        raise ConfigError(f"workers={workers!r} must be >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(out.glob("part-*.parquet")) + [p for p in (out / "domain.json", out / "schema.yaml") if p.exists()]
    if existing:
        if not overwrite:
            raise ConfigError(f"output directory {str(out)!r} already holds {existing[0].name!r}; pass overwrite=True")
        for p in existing:
            p.unlink()
    n_files = -(-n_rows // rows_per_file)
    if n_files > 99_999:
        raise ConfigError(f"{n_files} files exceed part-99999; raise rows_per_file={rows_per_file}")
    schema = census_schema(n_attributes)

    def one(i: int) -> Path:
        rows = min(rows_per_file, n_rows - i * rows_per_file)
        return write_part(out / f"part-{i:05d}.parquet", generate_part(i, rows, seed=seed, n_attributes=n_attributes))

    if workers == 1:
        files = [one(i) for i in range(n_files)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            files = list(pool.map(one, range(n_files)))
    (out / "domain.json").write_text(json.dumps(schema.domain.to_dict()))
    schema.save(out / "schema.yaml")
    return files, schema.domain


# ---- small raw-label demo frame (exercises encoding: categories, numeric bins, dates, missing) ----

def demo_schema() -> Schema:
    """Rich schema matching ``generate_demo_frame`` (numeric age with missing code, dates, categories)."""
    specs, _ = _model()
    lab = {s.name: list(s.labels) for s in specs}
    return Schema.from_dict({"attributes": [
        {"name": "age", "type": "numeric", "bins": AGE_EDGES, "missing": "code"},
        {"name": "sex", "type": "categorical", "categories": lab["sex"]},
        {"name": "race", "type": "categorical", "categories": lab["race"]},
        {"name": "region", "type": "categorical", "categories": lab["region"]},
        {"name": "marital_status", "type": "categorical", "categories": lab["marital_status"]},
        {"name": "education", "type": "categorical", "categories": lab["education"]},
        {"name": "workclass", "type": "categorical", "categories": lab["workclass"]},
        {"name": "hours_per_week", "type": "numeric", "bins": HOURS_EDGES},
        {"name": "income", "type": "numeric", "bins": INCOME_EDGES, "clip": True},
        {"name": "signup", "type": "date", "bins": SIGNUP_EDGES},
    ]})


def generate_demo_frame(n_rows: int, seed: int = 0) -> pd.DataFrame:
    """Small raw table (strings, numbers with NaN, dates) whose encoding follows ``demo_schema``."""
    if n_rows < 0:
        raise ConfigError(f"n_rows={n_rows!r} must be >= 0")
    specs, _ = _model()
    codes = generate_part(0, n_rows, seed=seed, n_attributes=10)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1 << 30,)))
    lab = {s.name: np.asarray(s.labels, dtype=object) for s in specs}

    def within(edges: Sequence[float], c: np.ndarray, integral: bool) -> np.ndarray:
        lo, hi = np.asarray(edges[:-1], float)[c], np.asarray(edges[1:], float)[c]
        v = lo + rng.random(len(c)) * (hi - lo)
        return np.minimum(np.floor(v), hi - 1) if integral else np.round(v, 2)

    age = within(AGE_EDGES, codes["age"].to_numpy(), True)
    age[rng.random(n_rows) < 0.02] = np.nan
    start = pd.Timestamp(SIGNUP_EDGES[0]).value
    stop = pd.Timestamp(SIGNUP_EDGES[-1]).value
    days = rng.integers(0, (stop - start) // 86_400_000_000_000, n_rows)
    frame = pd.DataFrame({
        "id": np.arange(n_rows, dtype=np.int64),
        "age": age,
        "sex": lab["sex"][codes["sex"].to_numpy()],
        "race": lab["race"][codes["race"].to_numpy()],
        "region": lab["region"][codes["region"].to_numpy()],
        "marital_status": lab["marital_status"][codes["marital_status"].to_numpy()],
        "education": lab["education"][codes["education"].to_numpy()],
        "workclass": lab["workclass"][codes["workclass"].to_numpy()],
        "hours_per_week": within(HOURS_EDGES, codes["hours_per_week"].to_numpy(), True).astype(np.int64),
        "income": within(INCOME_EDGES, codes["income"].to_numpy(), False),
        "signup": pd.to_datetime(start + days * 86_400_000_000_000),
    })
    for c in ("sex", "race", "region", "marital_status", "education", "workclass"):
        frame[c] = frame[c].astype(str)
    return frame
