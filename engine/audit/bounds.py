"""Statistics of the privacy audit: a distinguishing test fitted on one half of the trials, and a lower bound
on ε from its error rates on the other half (Clopper–Pearson, at a stated confidence).

If a mechanism M is (ε, δ)-DP, every test that tells M(D) from M(D') (D, D' neighbours) by rejecting
"the output came from D" has false-positive rate FPR (says D' on an output of D) and false-negative rate
FNR (says D on an output of D') with

    FPR + e^ε·FNR ≥ 1 − δ   and   FNR + e^ε·FPR ≥ 1 − δ        (Kairouz, Oh & Viswanath 2015)

so ε ≥ log((1 − δ − FNR) / FPR) and ε ≥ log((1 − δ − FPR) / FNR). The rates are estimated on held-out
trials: with one-sided Clopper–Pearson upper limits FPR⁺, FNR⁺ at level 1 − α/2 each, both rates lie below
their limits with probability ≥ 1 − α (union bound), and then

    ε ≥ max(0, log((1 − δ − FNR⁺) / FPR⁺), log((1 − δ − FPR⁺) / FNR⁺))

holds with probability ≥ 1 − α = the stated confidence (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021).
The test (a scalar statistic of the outputs and a threshold) is chosen on the training half only, so it is
fixed before the held-out half is looked at; choosing it among many candidates costs power, not validity.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta as _beta

from privcube.core.errors import ConfigError


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper limit at level 1 − ``alpha`` for a binomial rate seen ``k`` times in ``n`` trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ConfigError(f"audit: a rate needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ConfigError(f"audit: alpha must lie in (0, 1), got {alpha!r}")
    if k >= n:
        return 1.0
    return float(_beta.ppf(1.0 - alpha, k + 1, n - k))


def epsilon_lower_bound(false_pos: int, n_neg: int, false_neg: int, n_pos: int, delta: float,
                        confidence: float) -> float:
    """The ε lower bound (module docstring) from ``false_pos`` of ``n_neg`` outputs of D said to be D', and
    ``false_neg`` of ``n_pos`` outputs of D' said to be D; valid with probability ≥ ``confidence``."""
    if not 0 < confidence < 1:
        raise ConfigError(f"audit: confidence must lie in (0, 1), got {confidence!r}")
    if not 0 <= delta < 1:
        raise ConfigError(f"audit: delta must lie in [0, 1), got {delta!r}")
    alpha = (1.0 - confidence) / 2.0
    fpr = clopper_pearson_upper(false_pos, n_neg, alpha)
    fnr = clopper_pearson_upper(false_neg, n_pos, alpha)
    return _bound(fpr, fnr, delta)


def _bound(fpr: float | np.ndarray, fnr: float | np.ndarray, delta: float) -> np.ndarray:
    """max(0, log((1−δ−FNR)/FPR), log((1−δ−FPR)/FNR)), elementwise (0 where a numerator is not positive)."""
    fpr, fnr = np.asarray(fpr, dtype=float), np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((1.0 - delta - fnr > 0) & (fpr > 0), np.log((1.0 - delta - fnr) / fpr), 0.0)
        b = np.where((1.0 - delta - fpr > 0) & (fnr > 0), np.log((1.0 - delta - fpr) / fnr), 0.0)
    out = np.maximum(0.0, np.maximum(a, b))
    return out if out.ndim else float(out)


def _upper_many(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """``clopper_pearson_upper`` for an array of counts (same n)."""
    k = np.asarray(k, dtype=float)
    out = np.ones_like(k)
    below = k < n
    out[below] = _beta.ppf(1.0 - alpha, k[below] + 1.0, n - k[below])
    return out


@dataclass(frozen=True)
class ThresholdTest:
    """Say D' when ``sign · statistic > threshold`` (``sign`` is +1 or −1)."""

    sign: float
    threshold: float

    def says_second(self, s: np.ndarray) -> np.ndarray:
        """True where the test says the output came from D'."""
        return self.sign * np.asarray(s, dtype=float) > self.threshold


def best_threshold(s0: np.ndarray, s1: np.ndarray, delta: float, confidence: float) -> tuple[ThresholdTest, float]:
    """The threshold test on a scalar statistic (outputs of D: ``s0``, of D': ``s1``) whose ε bound,
    computed on these samples as it would be on held-out ones, is largest; returns (test, that bound)."""
    s0, s1 = np.asarray(s0, dtype=float).ravel(), np.asarray(s1, dtype=float).ravel()
    n0, n1 = s0.size, s1.size
    alpha = (1.0 - confidence) / 2.0
    best: tuple[ThresholdTest, float] = (ThresholdTest(1.0, math.inf), 0.0)
    for sign in (1.0, -1.0):
        a, b = np.sort(sign * s0), np.sort(sign * s1)
        values = np.unique(np.concatenate([a, b]))
        if values.size < 2:
            continue
        cuts = (values[:-1] + values[1:]) / 2.0  # every distinct split of the pooled values
        fp = n0 - np.searchsorted(a, cuts, side="right")  # outputs of D above the cut: said D'
        fn = np.searchsorted(b, cuts, side="right")  # outputs of D' at or below: said D
        bounds = _bound(_upper_many(fp, n0, alpha), _upper_many(fn, n1, alpha), delta)
        i = int(np.argmax(bounds))
        if bounds[i] > best[1]:
            best = (ThresholdTest(sign, float(cuts[i])), float(bounds[i]))
    return best


def candidate_directions(x0: np.ndarray, x1: np.ndarray, ridge: float = 1e-6) -> list[tuple[str, np.ndarray]]:
    """Scalar statistics to try, as (name, weight vector over the features): each feature alone, and the
    linear discriminant (pooled covariance, a small ridge), the likelihood-ratio statistic of Gaussian noise."""
    x0, x1 = np.asarray(x0, dtype=float), np.asarray(x1, dtype=float)
    d = x0.shape[1]
    out: list[tuple[str, np.ndarray]] = []
    pooled = np.vstack([x0, x1])
    scale = pooled.std(axis=0)
    live = scale > 0
    for j in np.flatnonzero(live):
        w = np.zeros(d)
        w[j] = 1.0
        out.append((f"feature {j}", w))
    if live.sum() >= 2:
        z0 = x0[:, live] / scale[live]
        z1 = x1[:, live] / scale[live]
        cov = (np.cov(z0, rowvar=False) + np.cov(z1, rowvar=False)) / 2.0
        cov = np.atleast_2d(cov) + ridge * max(float(np.trace(np.atleast_2d(cov))) / live.sum(), 1e-12) * np.eye(live.sum())
        diff = z1.mean(axis=0) - z0.mean(axis=0)
        try:
            wz = np.linalg.solve(cov, diff)
        except np.linalg.LinAlgError:
            wz = np.linalg.lstsq(cov, diff, rcond=None)[0]
        w = np.zeros(d)
        w[live] = wz / scale[live]
        if np.all(np.isfinite(w)) and np.any(w != 0):
            out.append(("linear discriminant", w))
    return out


@dataclass(frozen=True)
class AuditBound:
    """The held-out result: the ε lower bound, the test used, and its error counts."""

    epsilon: float
    statistic: str
    false_pos: int
    n_neg: int
    false_neg: int
    n_pos: int
    training_epsilon: float


def audit_bound(train0: np.ndarray, train1: np.ndarray, test0: np.ndarray, test1: np.ndarray, delta: float,
                confidence: float) -> AuditBound:
    """Fit the statistic and threshold on (``train0``, ``train1``) (features of outputs of D and D', one row per
    trial), then bound ε from the test's errors on the held-out (``test0``, ``test1``)."""
    train0, train1 = np.atleast_2d(train0), np.atleast_2d(train1)
    test0, test1 = np.atleast_2d(test0), np.atleast_2d(test1)
    best = ("none", np.zeros(train0.shape[1]), ThresholdTest(1.0, math.inf), 0.0)
    for name, w in candidate_directions(train0, train1):
        test, bound = best_threshold(train0 @ w, train1 @ w, delta, confidence)
        if bound > best[3]:
            best = (name, w, test, bound)
    name, w, test, train_bound = best
    fp = int(np.count_nonzero(test.says_second(test0 @ w)))
    fn = int(np.count_nonzero(~test.says_second(test1 @ w)))
    eps = epsilon_lower_bound(fp, test0.shape[0], fn, test1.shape[0], delta, confidence)
    return AuditBound(float(eps), name, fp, test0.shape[0], fn, test1.shape[0], float(train_bound))


__all__ = ["AuditBound", "ThresholdTest", "audit_bound", "best_threshold", "candidate_directions",
           "clopper_pearson_upper", "epsilon_lower_bound"]
