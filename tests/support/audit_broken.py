"""Deliberately broken variants of real mechanisms, for the privacy audit to catch (tests and
benchmarks/privacy_audit.py). Each is built here by subclassing or patching; the shipped code has no switch
that breaks it. ``BROKEN`` lists them with the trials per dataset each audit uses."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.mechanisms.hdmm.mechanism import HDMM
from privcube.mechanisms.residual_planner import ResidualPlan, ResidualPlanner, p_coefficient
from privcube.audit import cases
from privcube.audit.runner import Case


class HalvedNoiseRP(ResidualPlanner):
    """ResidualPlanner whose noise standard deviations are half what its plan (and its charge) say."""

    def optimize(self, workload, budget):  # noqa: ANN001, ANN201
        plan = super().optimize(workload, budget)
        plan.sigma2 = {t: s / 4.0 for t, s in plan.sigma2.items()}
        return plan


class HalvedScaleHDMM(HDMM):
    """HDMM whose Laplace (or Gaussian) scale is half the calibrated one; it still charges the whole budget."""

    def unit_scale(self, budget):  # noqa: ANN001, ANN201
        kind, var, scale = super().unit_scale(budget)
        return kind, var / 4.0, scale / 2.0


class _UnchargedTotalPlan(ResidualPlan):
    """A plan whose privacy cost leaves out its first measurement, the total (an off-by-one in the sum)."""

    def privacy_cost(self) -> float:
        return float(sum(p_coefficient(self.domain, t, self.lattice) / s for t, s in self.sigma2.items() if t))


class UnchargedTotalRP(ResidualPlanner):
    """ResidualPlanner that measures the total but does not charge it."""

    def optimize(self, workload, budget):  # noqa: ANN001, ANN201
        plan = super().optimize(workload, budget)
        plan.__class__ = _UnchargedTotalPlan
        return plan


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the block (the test's monkeypatch, usable outside pytest too)."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def clipping_ignored() -> contextlib.AbstractContextManager:
    """The privacy unit's row bound not enforced: ``truncate_per_id``'s per-partition step keeps every row."""
    from privcube.storage import contribution

    return patched(contribution, "_keep_k", lambda part, names, k, key: part[list(names)].reset_index(drop=True))


def noiseless_selection() -> contextlib.AbstractContextManager:
    """aim-grem's exponential mechanism without its Gumbel noise: the best score is always selected (the
    selection budget is still charged)."""
    from privcube.mechanisms.aim_grem import selection

    return patched(selection, "select", lambda score, epsilon, sensitivity, rng: int(np.argmax(score)))


#: the total-heavy workload under which the uncharged total is most of the spend: weight 32 puts 89 % of
#: ResidualPlanner's ρ on the total, so the ledger claims ρ 0.124 of the 1.125 measured
TOTAL_HEAVY = cases._config("residual-planner", [{"kway": 0, "weight": 32}, {"attributes": ["a"]}],
                            {"rho": 1.125, "delta": cases.AUDIT_DELTA}, cases.D2)


@dataclass(frozen=True)
class Broken:
    """A broken variant: its name, the case it breaks, how (a patch around the audit, if any), and trials."""

    name: str
    what: str
    case: Callable[[], Case]
    patch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    trials: int = 2000


def _suite_case(key: str) -> Case:
    return next(c for c in cases.suite() if c.key == key)


def _rp_halved() -> Case:
    real = _suite_case("rp")
    return cases.single_table_case("rp-halved", real.notes["config"], real.first, real.seconds, trials={},
                                   mechanism=lambda cfg: HalvedNoiseRP(cfg.mechanism_params))


def _hdmm_halved() -> Case:
    real = _suite_case("hdmm-laplace")
    return cases.single_table_case("hdmm-laplace-halved", real.notes["config"], real.first, real.seconds, trials={},
                                   mechanism=lambda cfg: HalvedScaleHDMM(cfg.mechanism_params))


def _uncharged() -> Case:
    add = [("add (0, 0)", cases._plus(cases.BASE2, (0, 0)))]
    return cases.single_table_case("rp-uncharged-total", TOTAL_HEAVY, cases.BASE2, add, trials={},
                                   mechanism=lambda cfg: UnchargedTotalRP(cfg.mechanism_params))


def _renamed(key: str, new: str) -> Callable[[], Case]:
    def make() -> Case:
        case = _suite_case(key)
        return case.with_run(case.run, key=new)  # its own noise seeds, apart from the real case's

    return make


BROKEN = [
    Broken("rp-halved", "residual-planner, noise scale halved", _rp_halved, trials=4000),
    Broken("hdmm-laplace-halved", "hdmm (laplace), noise scale halved", _hdmm_halved, trials=2000),
    Broken("rp-uncharged-total", "residual-planner, the total measured but not charged", _uncharged, trials=2000),
    Broken("rp-unit-unclipped", "residual-planner, privacy_unit max_rows not enforced", _renamed("rp-unit", "rp-unit-unclipped"),
           clipping_ignored, trials=1000),
    Broken("aim-noiseless-selection", "aim-grem, selection without noise", _renamed("aim-selection", "aim-noiseless"),
           noiseless_selection, trials=600),
]
