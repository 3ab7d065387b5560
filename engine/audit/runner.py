"""Empirical privacy audit: run a mechanism many times on two neighbouring datasets and bound its ε from below.

A :class:`Case` is one mechanism as a job runs it (a job config: mechanism, parameters, workload, budget,
noise sampler, privacy unit), a dataset D and candidate neighbours D' (the worst-case record for the stated
neighbour relation, or several candidates of which a pilot picks the most distinguishable), and the
features a test may read from one run's released outputs (answers, selection trace, published answers,
synthetic records, links). :func:`run_case` runs it ``trials`` times on D and on D', each run with its own
noise seed (the release code path: a CSPRNG stream keyed by a 128-bit seed derived per trial), fits a
threshold test on half of the trials and reports the held-out lower bound on ε
(:mod:`privcube.audit.bounds`). The claim is what the run's own ledger says it spent (ε at the
audit's δ). The verdict fails when the lower bound exceeds the claim: the mechanism leaks more than it
charges. Nothing here reads user data; the datasets are built in :mod:`privcube.audit.cases`.
"""
from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError
from privcube.audit.bounds import AuditBound, audit_bound

#: the confidence of every reported bound unless asked otherwise
CONFIDENCE = 0.95
MODES = ("fast", "all")


@dataclass(frozen=True)
class Outcome:
    """One run of a case: the features a test may read, and the ε its ledger claims at the case's δ."""

    features: np.ndarray
    claim: float


@dataclass(frozen=True)
class Case:
    """One audited configuration (see the module docstring).

    ``run(dataset, noise) -> Outcome`` runs the mechanism once; ``noise(entropy)`` makes the noise source of a
    trial; ``first`` is D and ``seconds`` the candidate neighbours (label, D'); ``trials`` the trials per
    dataset in each mode; ``pilot`` the trials per candidate used to pick one when there are several;
    ``fast_suite`` puts the case in the default ``--fast`` subset.
    """

    key: str
    mechanism: str
    noise_kind: str
    neighbours: str
    delta: float
    run: Callable[[Any, Any], Outcome]
    noise: Callable[[int], Any]
    first: Any
    seconds: Sequence[tuple[str, Any]]
    trials: Mapping[str, int]
    pilot: int = 60
    notes: Mapping[str, Any] = field(default_factory=dict)
    fast_suite: bool = False  # in the subset `privcube audit --fast` runs when no --mechanism is named

    def with_run(self, run: Callable[[Any, Any], Outcome], key: str | None = None) -> Case:
        """The same case run by another function (e.g. a test's deliberately broken variant)."""
        return replace(self, run=run, key=key or self.key)


@dataclass(frozen=True)
class AuditRow:
    """One line of the audit table."""

    mechanism: str
    noise: str
    neighbours: str
    claim: float
    lower_bound: float
    confidence: float
    delta: float
    trials: int
    pair: str
    statistic: str
    seconds: float
    bound: AuditBound | None = None

    @property
    def passed(self) -> bool:
        """The verdict: the lower bound does not exceed what the ledger claims."""
        return self.lower_bound <= self.claim

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        out = {"mechanism": self.mechanism, "noise": self.noise, "claimed_epsilon": self.claim,
               "lower_bound": self.lower_bound, "confidence": self.confidence, "verdict": self.verdict,
               "delta": self.delta, "trials": self.trials, "neighbours": self.neighbours, "pair": self.pair,
               "statistic": self.statistic, "seconds": round(self.seconds, 2)}
        if self.bound is not None:
            out["errors"] = {"false_positive": self.bound.false_pos, "held_out_first": self.bound.n_neg,
                             "false_negative": self.bound.false_neg, "held_out_second": self.bound.n_pos}
        return out


def trial_entropy(seed: int, case: str, role: str, index: int) -> int:
    """128 bits for one trial's noise, from the audit seed, the case, the dataset's role and the trial index:
    every trial of every case draws from its own stream."""
    text = f"privcube-audit-v1\x00{int(seed)}\x00{case}\x00{role}\x00{int(index)}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:16], "little")


def _outcomes(case: Case, dataset: Any, seed: int, role: str, n: int, start: int = 0) -> tuple[np.ndarray, list[float]]:
    feats, claims = [], []
    for i in range(start, start + n):
        out = case.run(dataset, case.noise(trial_entropy(seed, case.key, role, i)))
        feats.append(np.asarray(out.features, dtype=float).ravel())
        claims.append(float(out.claim))
    widths = {f.size for f in feats}
    if len(widths) > 1:
        raise ConfigError(f"audit case {case.key!r}: runs released different numbers of features {sorted(widths)}")
    return np.vstack(feats), claims


def choose_pair(case: Case, seed: int, pilot: int | None = None) -> tuple[str, Any]:
    """The candidate neighbour whose outputs differ most from D's, by the linear discriminant's separation
    (Mahalanobis distance of the mean difference) on ``pilot`` trials that share their noise seeds with D's
    (common random numbers: for a mechanism linear in the data the difference is then exact). The pilot's
    seeds are not used again, so choosing the pair leaves the held-out bound valid."""
    if len(case.seconds) == 1:
        return case.seconds[0]
    n = pilot if pilot is not None else case.pilot
    x0, _ = _outcomes(case, case.first, seed, "pilot", n)
    cov = np.atleast_2d(np.cov(x0, rowvar=False)) if n > 1 else np.eye(x0.shape[1])
    cov = cov + 1e-9 * max(float(np.trace(cov)) / max(cov.shape[0], 1), 1e-12) * np.eye(cov.shape[0])
    best, best_score = case.seconds[0], -math.inf
    for label, dataset in case.seconds:
        x1, _ = _outcomes(case, dataset, seed, "pilot", n)
        diff = (x1 - x0).mean(axis=0)
        score = float(diff @ np.linalg.lstsq(cov, diff, rcond=None)[0])
        if score > best_score:
            best, best_score = (label, dataset), score
    return best


def run_case(case: Case, mode: str = "fast", *, seed: int = 0, confidence: float = CONFIDENCE,
             trials: int | None = None) -> AuditRow:
    """Audit one case: ``trials`` runs on D and on D' (default: the case's count for ``mode``), half to fit the
    test, half held out for the bound."""
    t0 = time.perf_counter()
    n = int(trials if trials is not None else case.trials[mode])
    if n < 4:
        raise ConfigError(f"audit: at least 4 trials per dataset are needed, got {n}")
    label, second = choose_pair(case, seed)
    x0, c0 = _outcomes(case, case.first, seed, "first", n)
    x1, c1 = _outcomes(case, second, seed, "second", n)
    half = n // 2
    bound = audit_bound(x0[:half], x1[:half], x0[half:], x1[half:], case.delta, confidence)
    claim = max(c0 + c1)  # the most the ledger ever claimed (they agree for every case here)
    return AuditRow(case.mechanism, case.noise_kind, case.neighbours, claim, bound.epsilon, confidence, case.delta,
                    n, label, bound.statistic, time.perf_counter() - t0, bound)


def run_audit(cases: Sequence[Case], mode: str = "fast", *, seed: int = 0, confidence: float = CONFIDENCE,
              on_row: Callable[[AuditRow], None] | None = None) -> list[AuditRow]:
    """Audit every case with its trials for ``mode``; ``on_row`` sees each row as it is done. Progress bars of
    the mechanisms are silenced meanwhile."""
    from privcube.core import progress

    if mode not in MODES:
        raise ConfigError(f"audit: mode must be one of {MODES}, got {mode!r}")
    quiet = progress.is_quiet()
    progress.set_quiet(True)
    rows = []
    try:
        for case in cases:
            row = run_case(case, mode, seed=seed, confidence=confidence)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        progress.set_quiet(quiet)
    return rows


HEADER = ("mechanism", "noise", "claimed ε", "lower bound", "confidence", "verdict", "δ", "trials", "neighbours")


def table_line(row: AuditRow) -> str:
    """One row of the printed table (tab-aligned by :func:`format_table`)."""
    return "\t".join([row.mechanism, row.noise, f"{row.claim:.3f}", f"{row.lower_bound:.3f}",
                      f"{row.confidence:g}", row.verdict, f"{row.delta:g}", str(row.trials),
                      f"{row.neighbours}: {row.pair}"])


def format_table(rows: Sequence[AuditRow]) -> str:
    """The audit table: mechanism, noise, claimed ε, lower bound, confidence, verdict (then δ, trials per
    dataset and the neighbouring pair), columns aligned."""
    cells = [list(HEADER)] + [table_line(r).split("\t") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells)


__all__ = ["AuditRow", "CONFIDENCE", "Case", "MODES", "Outcome", "choose_pair", "format_table", "run_audit",
           "run_case", "table_line", "trial_entropy"]
