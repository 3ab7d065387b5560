"""The relational mechanism's parameters: defaults and validation (ConfigError naming the key).

Every parameter is checked up front, before data is read or budget spent, so a bad value never
costs privacy. ``check_params`` is what the config loader and the mechanism both call.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError
from privcube.relational.stages.degree_bound import check_d_max

PARAMS: dict[str, Any] = {
    "d_max": 10, "truncate": False, "k": 3, "iterations": 10, "workloads_per_iteration": 3, "alpha": 0.2,
    "candidates": 300, "pgd_iters": 100, "slice_fraction": None, "slice_cells": 250_000,
    "slices_per_iteration": 8, "guaranteed": 0.2, "m_syn": None, "synthetic_rows": None,
    "objective": "global", "workloads_per_slice": None, "estimator": "tree", "table_marginals": 2,
    "chunk_size": 1_000_000, "evaluate_nonprivate": False, "evaluate": None, "shrinkage": "auto",
    "shrinkage_margin": 1.0, "candidate_orders": "closure", "noise_penalty": True, "max_noise": 0.2,
    "self_loops": False, "shrink_towards": "initial", "refit": True, "degrees": "preserve",
    "degree_share": "auto", "sibling_share": "auto", "uninformative": "warn", "optimiser": "auto", "type_cells": 3_000_000, "type_iters": "auto",
    "shrink_by": "pooled", "strategy": "auto", "left_degrees": "kept", "score": "auto",
}

#: one line per key of PARAMS (the reference documentation is generated from it; every key must have one)
PARAM_HELP: dict[str, str] = {
    "d_max": "public bound on links per record (the sensitivity); a link may carry its own under privacy.links",
    "truncate": "drop a record's links beyond d_max (first come) before measuring, instead of refusing the data",
    "k": "order of the cross-table marginals learned and reported",
    "candidate_orders": "closure | k | a list of orders >= 2: the orders of the candidate cross workloads "
                        "(closure: 2..k)",
    "iterations": "measuring rounds T (0: no link learning)",
    "workloads_per_iteration": "draws per round K (at most T x K measurements)",
    "alpha": "share of each measurement unit spent on the exponential-mechanism selection, in (0, 1)",
    "candidates": "size of the random pool of unmeasured workloads scored per draw",
    "score": "auto | aim | gain: the selection score (aim: AIM's error minus the expected noise error; gain: the "
             "error a shrunk release removes per unit of rho; auto: gain when the public m / d_sens >= 200)",
    "noise_penalty": "score with the expected noise of the measurement subtracted (false: the paper's score)",
    "max_noise": "tau: each release gets the rho its cells need for an expected noise norm <= tau (null: the "
                 "paper's equal split)",
    "uninformative": "warn | random: when the public check finds no measurement can meet max_noise, measure "
                     "anyway with a warning, or release the data-independent random links",
    "shrinkage": "auto | true | false: shrink noisy releases towards the data-independent start (auto: when "
                 "max_noise is set)",
    "shrinkage_margin": "how many noise standard deviations below the unbiased estimate the shrinkage's "
                        "signal power is taken",
    "shrink_towards": "initial | current: shrink towards the data-independent start or the current links",
    "shrink_by": "pooled | auto | components | whole: make overlapping releases consistent and shrink once, or "
                 "shrink each release by ANOVA component or whole",
    "strategy": "auto | adaptive | measure-all: measure every 2-way cross marginal first when a public test "
                "finds it cheap (auto), never, or always",
    "degrees": "preserve | free: keep the records' degrees through link learning, or not (the earlier behaviour)",
    "degree_share": "auto | a share in [0, 1) of the links budget for the degree releases",
    "sibling_share": "auto | a share in [0, 1) of a later sibling link's budget for the count of parents with "
                     "children in both (0: siblings learned independently)",
    "left_degrees": "kept | learned: many-to-many left degrees kept from the balanced start, or learned per "
                    "record type (<= d_max)",
    "pgd_iters": "projected gradient descent iterations per slice",
    "objective": "global | paper: fit all released workloads, or the paper's per-slice choice",
    "workloads_per_slice": "workloads fitted per slice: the worst-fitted ones (null: all)",
    "refit": "keep fitting in rounds that drew no new measurement (false: such a round ends learning)",
    "optimiser": "auto | types | slices: stage 2's solver, over record types while #types1 x #types2 <= "
                 "type_cells, else slices",
    "type_cells": "public bound on #types1 x #types2 for the record-type solver",
    "type_iters": "auto | int: accelerated PGD steps per record-type solve (auto: 500, fewer on large type grids)",
    "slices_per_iteration": "int | all: slices of the link matrix per iteration (all: every record)",
    "slice_fraction": "slice size as a share of each table's records, in (0, 1] (null: from slice_cells)",
    "slice_cells": "cells of a slice of the link matrix",
    "guaranteed": "share of each slice seeded with the endpoints of existing links, in [0, 1]",
    "m_syn": "synthetic link count (default: the real, public one)",
    "synthetic_rows": "synthetic table sizes (default: the real, public ones)",
    "table_marginals": "stage 1: ResidualPlanner on all table_marginals-way marginals of each table",
    "estimator": "stage 1: the estimator the synthetic records are sampled from",
    "chunk_size": "stage 1: records sampled per chunk",
    "self_loops": "self-referential links: allow i -> i",
    "evaluate_nonprivate": "add the NON-PRIVATE evaluation against the real data to the report (testing only)",
    "evaluate": "the earlier name of evaluate_nonprivate, also accepted",
}

_WHO = "mechanism 'relational'"


def is_number(v: Any) -> bool:
    """A real number (not a bool), finite."""
    return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _check_counts(q: Mapping[str, Any]) -> None:
    """Integer parameters (iterations may be 0: no link learning)."""
    for key in ("iterations", "workloads_per_iteration", "candidates", "pgd_iters", "slices_per_iteration", "k",
                "table_marginals", "chunk_size", "type_cells", "type_iters"):
        v = q[key]
        if key == "slices_per_iteration" and v == "all":
            continue  # every link (many-to-many with degrees kept) or every parent, each iteration
        if key == "type_iters" and v == "auto":
            continue  # 500, fewer on large type grids (type_iteration.type_iterations)
        lo = 0 if key == "iterations" else 1
        if not _is_int(v) or v < lo:
            alt = {"slices_per_iteration": " or all", "type_iters": " or auto"}.get(key, "")
            raise ConfigError(f"{_WHO}: parameter {key!r} must be an integer >= {lo}{alt}, got {v!r}")
    for key in ("m_syn", "workloads_per_slice"):
        v = q[key]
        if v is not None and (not _is_int(v) or v < 1):
            raise ConfigError(f"{_WHO}: parameter {key!r} must be an integer >= 1 (or null), got {v!r}")


def _check_choices(q: Mapping[str, Any]) -> None:
    """Enumerated and boolean parameters."""
    if q["objective"] not in ("global", "paper"):
        raise ConfigError(f"{_WHO}: parameter 'objective' must be 'global' or 'paper', got {q['objective']!r}")
    co = q["candidate_orders"]
    if not (co in ("k", "closure") or (isinstance(co, (list, tuple)) and co and all(
            _is_int(o) and o >= 2 for o in co))):
        raise ConfigError(f"{_WHO}: parameter 'candidate_orders' must be 'k', 'closure' or a list of "
                          f"integers >= 2, got {co!r}")
    if q["shrink_towards"] not in ("current", "initial"):
        raise ConfigError(f"{_WHO}: parameter 'shrink_towards' must be 'current' or 'initial', "
                          f"got {q['shrink_towards']!r}")
    if q["strategy"] not in ("auto", "adaptive", "measure-all"):
        raise ConfigError(f"{_WHO}: parameter 'strategy' must be 'auto', 'adaptive' or 'measure-all', "
                          f"got {q['strategy']!r}")
    if q["shrink_by"] not in ("auto", "components", "whole", "pooled"):
        raise ConfigError(f"{_WHO}: parameter 'shrink_by' must be 'auto', 'components', 'whole' or 'pooled', "
                          f"got {q['shrink_by']!r}")
    if q["shrinkage"] not in (True, False, "auto"):
        raise ConfigError(f"{_WHO}: parameter 'shrinkage' must be true, false or 'auto', got {q['shrinkage']!r}")
    if q["uninformative"] not in ("warn", "random"):
        raise ConfigError(f"{_WHO}: parameter 'uninformative' must be 'warn' or 'random', got {q['uninformative']!r}")
    if q["optimiser"] not in ("auto", "types", "slices"):
        raise ConfigError(f"{_WHO}: parameter 'optimiser' must be 'auto', 'types' or 'slices', got {q['optimiser']!r}")
    if q["score"] not in ("auto", "gain", "aim"):
        raise ConfigError(f"{_WHO}: parameter 'score' must be 'auto', 'gain' or 'aim', got {q['score']!r}")
    if q["left_degrees"] not in ("learned", "kept"):
        raise ConfigError(f"{_WHO}: parameter 'left_degrees' must be 'learned' or 'kept', got {q['left_degrees']!r}")
    if q["degrees"] not in ("preserve", "free"):
        raise ConfigError(f"{_WHO}: parameter 'degrees' must be 'preserve' or 'free', got {q['degrees']!r}")
    for key in ("noise_penalty", "truncate", "evaluate_nonprivate", "self_loops", "refit"):
        if not isinstance(q[key], bool):
            raise ConfigError(f"{_WHO}: parameter {key!r} must be true or false, got {q[key]!r}")
    if q["evaluate"] is not None and not isinstance(q["evaluate"], bool):
        raise ConfigError(f"{_WHO}: parameter 'evaluate' must be true or false, got {q['evaluate']!r}")


def _check_reals(q: Mapping[str, Any]) -> None:
    """Real-valued parameters and their ranges."""
    if not isinstance(q["alpha"], (int, float)) or not (0 < q["alpha"] < 1):
        raise ConfigError(f"{_WHO}: parameter 'alpha' must lie strictly in (0, 1), got {q['alpha']!r}")
    if not isinstance(q["guaranteed"], (int, float)) or not (0 <= q["guaranteed"] <= 1):
        raise ConfigError(f"{_WHO}: parameter 'guaranteed' must lie in [0, 1], got {q['guaranteed']!r}")
    mn = q["max_noise"]
    if mn is not None and (isinstance(mn, bool) or not isinstance(mn, (int, float)) or not mn > 0):
        raise ConfigError(f"{_WHO}: parameter 'max_noise' must be a positive number or null, got {mn!r}")
    sf = q["slice_fraction"]
    if sf is not None and (not is_number(sf) or not (0 < sf <= 1)):
        raise ConfigError(f"{_WHO}: parameter 'slice_fraction' must lie in (0, 1] (or be null), got {sf!r}")
    if not is_number(q["slice_cells"]) or not q["slice_cells"] >= 1:
        raise ConfigError(f"{_WHO}: parameter 'slice_cells' must be a number >= 1, got {q['slice_cells']!r}")
    ds = q["degree_share"]
    if ds != "auto" and (not is_number(ds) or not (0 <= ds < 1)):
        raise ConfigError(f"{_WHO}: parameter 'degree_share' must be 'auto' or lie in [0, 1), got {ds!r}")
    ss = q["sibling_share"]
    if ss != "auto" and (not is_number(ss) or not (0 <= ss < 1)):
        raise ConfigError(f"{_WHO}: parameter 'sibling_share' must be 'auto' or lie in [0, 1), got {ss!r}")
    if not is_number(q["shrinkage_margin"]) or not q["shrinkage_margin"] >= 0:
        raise ConfigError(f"{_WHO}: parameter 'shrinkage_margin' must be a number >= 0, "
                          f"got {q['shrinkage_margin']!r}")


def check_params(p: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters with defaults filled in, or ConfigError naming the first bad key."""
    unknown = set(p) - set(PARAMS) - {"name"}
    if unknown:
        raise ConfigError(f"{_WHO}: unknown parameter(s) {sorted(unknown)}; known: {sorted(PARAMS)}")
    q = {**PARAMS, **{k: v for k, v in p.items() if k != "name"}}
    check_d_max(q["d_max"])
    _check_counts(q)
    _check_reals(q)
    _check_choices(q)
    rows = q["synthetic_rows"]
    if rows is not None:
        if not isinstance(rows, Mapping) or not all(_is_int(n) and n >= 1 for n in rows.values()):
            raise ConfigError(f"{_WHO}: parameter 'synthetic_rows' must map table names to integers "
                              f">= 1, got {rows!r}")
    from privcube.synth.estimator import get_estimator

    get_estimator(q["estimator"])  # unknown names, or 'mbi' without the package: ConfigError before any release
    return q


__all__ = ["PARAMS", "PARAM_HELP", "check_params", "is_number"]
