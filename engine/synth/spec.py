"""The ``synthesize`` config section: synthetic records from a run's marginal answers (post-processing, no budget).

``true`` or a row count or ``{rows: N | auto, estimator: junction-tree | tree | mbi, chunk_size: N,
max_cells: N}``; ``auto`` rows = the noisy record count the answers imply; ``max_cells`` is the junction
tree's public cell budget. The workload must hold at least one marginal group.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError
from privcube.core.params import Param
from privcube.core.workload import Workload
from privcube.synth.estimator import DEFAULT_ESTIMATOR, ESTIMATORS
from privcube.synth.jt_fit import DEFAULT_MAX_CELLS

#: the keys of a ``synthesize`` mapping
PARAMS: dict[str, Param] = {
    "rows": Param("auto", "int >= 0 | auto", "records to write; auto: the noisy record count the answers imply"),
    "estimator": Param(DEFAULT_ESTIMATOR, " | ".join(ESTIMATORS), "the model fitted to the published marginals "
                                                                  "and sampled"),
    "chunk_size": Param(100_000, "int >= 1", "records sampled and written per chunk (bounds the memory)"),
    "max_cells": Param(DEFAULT_MAX_CELLS, "int >= 1", "the junction tree's public cell budget (cliques of the "
                                                      "model)"),
}
SYNTHESIZE_KEYS = set(PARAMS)


def parse_synthesize(spec: Any, workload: Workload) -> dict[str, Any] | None:
    """The validated ``synthesize`` section (every key filled in), or None when it is absent or false."""
    if spec is None or spec is False:
        return None
    if spec is True:
        spec = {}
    elif isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        spec = {"rows": int(spec)}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"synthesize: expected true, a row count or {{rows, estimator, chunk_size}}, got {spec!r}")
    bad = set(spec) - SYNTHESIZE_KEYS
    if bad:
        raise ConfigError(f"synthesize: unknown key(s) {sorted(bad)}; known: {sorted(SYNTHESIZE_KEYS)}")
    out = {k: spec.get(k, p.default) for k, p in PARAMS.items()}
    out["rows"] = _rows(out["rows"])
    for key in ("chunk_size", "max_cells"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"synthesize.{key} must be a positive integer, got {v!r}")
    if out["estimator"] not in ESTIMATORS:
        raise ConfigError(f"synthesize.estimator must be one of {', '.join(ESTIMATORS)}; got {out['estimator']!r}")
    if not any(g.is_marginal and g.attributes for g in workload):
        raise ConfigError("synthesize: the workload has no marginal group to build records from; add one, "
                          "e.g. {kway: 2}")
    return out


def _rows(rows: Any) -> Any:
    """``synthesize.rows``: ``auto`` or a whole number of records within privcube's limit."""
    from privcube.synth.records import MAX_RECORDS

    rows = int(rows) if isinstance(rows, np.integer) else rows
    if isinstance(rows, float) and rows.is_integer() and rows >= 0:
        raise ConfigError(f"synthesize.rows must be a whole number written as an integer, got {rows:g} (a float); "
                          f"write {int(rows)}")
    if rows != "auto" and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
        raise ConfigError(f"synthesize.rows must be a non-negative integer or 'auto', got {rows!r}")
    if rows != "auto" and rows > MAX_RECORDS:
        raise ConfigError(f"synthesize.rows = {rows:,} is above privcube's limit of {MAX_RECORDS:,} records "
                          "(gigabytes of Parquet and minutes of writing at the limit); ask for fewer")
    return rows


__all__ = ["PARAMS", "SYNTHESIZE_KEYS", "parse_synthesize"]
