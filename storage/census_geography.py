"""Seeded census-like persons placed in a geography (state > county > tract), for census releases (issue 35).

The public map (:func:`geography`) has skewed unit sizes: counties per state and tracts per county are drawn
from lognormal weights, every unit has at least one child. Persons (:func:`generate_census_geo`) are drawn with
:mod:`privcube.storage.generate`'s conditional tables, reweighted per tract (:class:`~privcube.storage.generate.Tilt`)
by a state shift, a county shift and a tract mixing weight between an "urban" and a "rural" profile, so their
distributions differ between units and hierarchy-aware estimation has something to win. The geography is the
source of truth for place: the flat generator's ``state`` attribute is dropped and ``region`` is derived from the
tract's state (state index mod 9, the flat generator's own state-region rule).

Tract populations are lognormal (the largest tract holds many times the median); counties and states inherit
the sums. Rows are laid out sorted by tract, file ``i`` holding rows ``[i * rows_per_file, ...)`` of that order, so
each file covers a contiguous range of tracts (hence of counties and states). File ``i`` depends only on
``(seed, i)`` (and the public sizes), is drawn in O(rows_per_file) memory, in parallel threads, and the output
appears all at once (a staging folder renamed into place) or not at all.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from privcube.core.errors import ConfigError
from privcube.storage.generate import Tilt, census_schema, check_n_attributes, draw_codes, write_part
from privcube.storage.schema import Attribute, Schema, code_dtype

_GEO_KEY = 35  # spawn-key prefix: the geography's streams never coincide with the flat generator's (i,) files
#: how each geographically varying attribute shifts: (ordinal?, state sd, county sd, urban-rural profile strength)
_SHIFTS: dict[str, tuple[bool, float, float, float]] = {
    "age": (True, 0.5, 0.3, -1.2),  # urban tracts younger
    "race": (False, 0.9, 0.5, 1.0),
    "education": (True, 0.3, 0.2, 0.8),
    "income": (True, 0.4, 0.3, 1.0),
    "citizenship": (False, 0.6, 0.3, 0.8),
    "language": (False, 0.7, 0.3, 0.6),
    "county_type": (False, 0.2, 1.2, 0.0),  # urban / suburban / rural: set by the tract's mixing weight below
    "tenure": (True, 0.3, 0.2, 1.0),  # urban tracts rent more
}
_COUNTY_TYPE_PROFILE = np.array([2.5, 0.0, -2.5])
_REGIONS = 9
FILES = {"persons": "persons", "map": "geo-map.parquet", "domain": "domain.json", "schema": "schema.yaml"}


def _check_sizes(states: int, counties: int, tracts: int) -> None:
    """Each level needs at least one unit per parent unit."""
    for name, v in (("states", states), ("counties", counties), ("tracts", tracts)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name}={v!r} must be a positive integer")
    if counties < states:
        raise ConfigError(f"counties={counties} must be >= states={states} (every state has a county)")
    if tracts < counties:
        raise ConfigError(f"tracts={tracts} must be >= counties={counties} (every county has a tract)")


def _children(rng: np.random.Generator, parents: int, children: int, sd: float) -> np.ndarray:
    """Children per parent: one each, the rest spread by lognormal weights (skewed sizes)."""
    w = rng.lognormal(0.0, sd, parents)
    return 1 + rng.multinomial(children - parents, w / w.sum())


def geography(seed: int = 0, *, states: int = 51, counties: int = 3100, tracts: int = 70_000) -> pd.DataFrame:
    """The public map: one row per tract (codes ``0..tracts-1``, sorted) with its county and state codes.

    State codes are ``1..states``; county codes are FIPS-like, ``state * 10^d + 2k + 1`` for the state's k-th
    county. Counties are numbered state by state and tracts county by county, so units nest in code ranges."""
    _check_sizes(states, counties, tracts)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_GEO_KEY, 0)))
    per_state = _children(rng, states, counties, 0.9)
    per_county = _children(rng, counties, tracts, 1.1)
    state_of_county = np.repeat(np.arange(states), per_state)
    rank = np.arange(counties) - np.repeat(np.cumsum(per_state) - per_state, per_state)
    digits = max(3, len(str(2 * int(per_state.max()) + 1)))
    county_code = (state_of_county + 1) * 10**digits + 2 * rank + 1
    county_of_tract = np.repeat(np.arange(counties), per_county)
    return pd.DataFrame({"tract": np.arange(tracts, dtype=np.int64),
                         "county": county_code[county_of_tract].astype(np.int64),
                         "state": (state_of_county[county_of_tract] + 1).astype(np.int64)})


@dataclass(frozen=True)
class _Plan:
    """Everything a file needs: rows per tract (cumulative), unit indexes and the per-unit log-shifts."""

    bounds: np.ndarray  # (tracts + 1,) cumulative rows: tract t holds rows bounds[t]:bounds[t+1]
    county: np.ndarray  # (tracts,) county index of each tract
    state: np.ndarray  # (tracts,) state index of each tract
    mix: np.ndarray  # (tracts,) the tract's weight of the "urban" profile, in [0, 1]
    shifts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # name -> (state, county, profile) log-shifts

    def tilt(self, name: str, lo: int, hi: int, tract: np.ndarray) -> Tilt:
        """The acceptance table of attribute ``name`` for tracts ``lo..hi-1`` (rows' tracts ``tract``)."""
        s, c, d = self.shifts[name]
        log = s[self.state[lo:hi]] + c[self.county[lo:hi]] + self.mix[lo:hi, None] * d[None, :]
        return Tilt((tract - lo).astype(np.int64), np.exp(log - log.max(axis=1, keepdims=True)))


def _shift(rng: np.random.Generator, units: int, k: int, ordinal: bool, sd: float) -> np.ndarray:
    """Log-shifts of one attribute's table per unit: a slope along an ordinal scale, else one shift per code."""
    if ordinal:
        slope = rng.normal(0.0, sd, units)[:, None] * np.linspace(-1.0, 1.0, k)[None, :]
        return slope + rng.normal(0.0, 0.1 * sd, (units, k))
    return rng.normal(0.0, sd, (units, k))


def _plan(seed: int, n_rows: int, geo: pd.DataFrame, names: list[str], sizes: dict[str, int]) -> _Plan:
    """Tract populations (lognormal weights, multinomial rows), the mixing weights and the shift tables."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_GEO_KEY, 1)))
    _, county = np.unique(geo["county"].to_numpy(), return_inverse=True)
    _, state = np.unique(geo["state"].to_numpy(), return_inverse=True)
    n_counties, n_states = int(county.max()) + 1, int(state.max()) + 1
    weight = rng.lognormal(0.0, 0.75, len(geo))
    rows = rng.multinomial(n_rows, weight / weight.sum())
    pop = np.bincount(county, weights=weight, minlength=n_counties)  # big counties lean urban
    z = (np.log(pop) - np.log(pop).mean()) / max(float(np.log(pop).std()), 1e-9)
    base = rng.beta(1.5, 1.5, n_counties)
    county_mix = 1.0 / (1.0 + np.exp(-(np.log(base / (1 - base)) + 0.8 * z)))
    mix = np.clip(county_mix[county] + rng.normal(0.0, 0.12, len(geo)), 0.0, 1.0)
    shifts = {}
    for name in _SHIFTS:  # every attribute draws its shifts (fixed order): a shorter schema changes nothing
        ordinal, s_sd, c_sd, strength = _SHIFTS[name]
        k = sizes[name]
        s, c = _shift(rng, n_states, k, ordinal, s_sd), _shift(rng, n_counties, k, ordinal, c_sd)
        d = np.linspace(-1.0, 1.0, k) * strength if ordinal else rng.normal(0.0, max(strength, 1e-12), k)
        if name == "county_type":
            d = _COUNTY_TYPE_PROFILE[:k]
        if name in names:
            shifts[name] = (s, c, d)
    bounds = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    return _Plan(bounds, county.astype(np.int64), state.astype(np.int64), mix, shifts)


def _part(plan: _Plan, index: int, start: int, stop: int, seed: int, n_attributes: int, tracts: int) -> pd.DataFrame:
    """Rows ``start..stop-1`` of the tract-sorted persons (file ``index``: its streams depend on ``(seed, index)``)."""
    lo = int(np.searchsorted(plan.bounds, start, side="right")) - 1
    hi = int(np.searchsorted(plan.bounds, stop - 1, side="right"))
    per = np.diff(np.clip(plan.bounds[lo:hi + 1], start, stop))
    tract = np.repeat(np.arange(lo, hi, dtype=np.int64), per)
    n = stop - start
    fixed = {"region": plan.state[tract] % _REGIONS, "state": np.zeros(n, dtype=np.uint8)}
    tilts = {name: plan.tilt(name, lo, hi, tract) for name in plan.shifts}
    streams = np.random.SeedSequence(seed, spawn_key=(_GEO_KEY, 2, int(index))).spawn(n_attributes)
    codes = draw_codes(streams, n, n_attributes, fixed=fixed, tilts=tilts)
    codes.pop("state", None)
    return pd.DataFrame({"tract": tract.astype(code_dtype(tracts)), **codes}, copy=False)


def census_geo_schema(n_attributes: int = 12, tracts: int = 70_000) -> Schema:
    """The persons' schema: ``tract`` (integer codes ``0..tracts-1``), then the first ``n_attributes`` census
    attributes of :func:`~privcube.storage.generate.census_schema` without ``state`` (the map gives it)."""
    flat = census_schema(n_attributes)
    return Schema((Attribute("tract", "integer", int(tracts)),) + tuple(a for a in flat if a.name != "state"))


def _existing(out: Path) -> list[Path]:
    """The generator's outputs already in ``out``."""
    return [out / f for f in FILES.values() if (out / f).exists()]


def _check_replaceable(out: Path) -> None:
    """``overwrite`` replaces only what the generator writes: a ``persons`` folder holding anything but its
    ``part-NNNNN.parquet`` files (someone's own data?) is refused, naming one such entry."""
    persons = out / FILES["persons"]
    if not persons.is_dir():
        return
    foreign = sorted(p.name for p in persons.iterdir() if not re.fullmatch(r"part-\d{5}\.parquet", p.name))
    if foreign:
        raise ConfigError(f"output folder {str(persons)!r} holds {foreign[0]!r}, which the generator did not write; "
                          "not replaced (choose another folder)")


def _check_args(n_rows: int, rows_per_file: int, workers: int | None) -> None:
    """Row counts positive, worker count positive (or None)."""
    for name, v in (("n_rows", n_rows), ("rows_per_file", rows_per_file)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name}={v!r} must be a positive integer")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers={workers!r} must be a positive integer")
    if -(-n_rows // rows_per_file) > 99_999:
        raise ConfigError(f"{-(-n_rows // rows_per_file)} files exceed part-99999; raise rows_per_file={rows_per_file}")


def generate_census_geo(out: str | Path, n_rows: int, *, seed: int = 0, n_attributes: int = 12,
                        rows_per_file: int = 2_000_000, states: int = 51, counties: int = 3100, tracts: int = 70_000,
                        workers: int | None = None, overwrite: bool = False) -> dict[str, Path]:
    """Write ``out/persons/part-*.parquet``, ``out/geo-map.parquet``, ``out/domain.json`` and ``out/schema.yaml``;
    return their paths by key (``persons``, ``map``, ``domain``, ``schema``).

    ``n_attributes`` counts the flat generator's attributes (1..30); ``state`` among them is dropped. Existing
    outputs in ``out`` are refused unless ``overwrite``; on failure nothing new is left in ``out``."""
    check_n_attributes(n_attributes)
    _check_sizes(states, counties, tracts)
    _check_args(n_rows, rows_per_file, workers)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    old = _existing(target)
    if old and not overwrite:
        raise ConfigError(f"output folder {str(target)!r} already holds {old[0].name!r}; pass overwrite=True")
    _check_replaceable(target)
    schema = census_geo_schema(n_attributes, tracts)
    geo = geography(seed, states=states, counties=counties, tracts=tracts)
    sizes = census_schema(30).domain.to_dict()
    plan = _plan(seed, int(n_rows), geo, [a.name for a in schema], sizes)
    stage = Path(tempfile.mkdtemp(prefix=".census-geo-", dir=target))
    try:
        (stage / FILES["persons"]).mkdir()
        _write_persons(stage / FILES["persons"], plan, int(n_rows), rows_per_file, seed, n_attributes, tracts, workers)
        write_part(stage / FILES["map"], geo)
        (stage / FILES["domain"]).write_text(json.dumps(schema.domain.to_dict()))
        schema.save(stage / FILES["schema"])
        for p in _existing(target):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        for name in FILES.values():
            os.replace(stage / name, target / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {key: target / name for key, name in FILES.items()}


def _write_persons(folder: Path, plan: _Plan, n_rows: int, rows_per_file: int, seed: int, n_attributes: int,
                   tracts: int, workers: int | None) -> list[Path]:
    """Draw and write every file, ``workers`` threads at a time (one file in memory per thread)."""
    n_files = -(-n_rows // rows_per_file)

    def one(i: int) -> Path:
        start, stop = i * rows_per_file, min((i + 1) * rows_per_file, n_rows)
        return write_part(folder / f"part-{i:05d}.parquet", _part(plan, i, start, stop, seed, n_attributes, tracts))

    threads = workers if workers is not None else min(os.cpu_count() or 1, 8)
    if threads == 1 or n_files == 1:
        return [one(i) for i in range(n_files)]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n_files)))


__all__ = ["FILES", "census_geo_schema", "generate_census_geo", "geography"]
