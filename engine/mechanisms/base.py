"""The mechanism interface: plain inputs in, plain results out; no knowledge of clusters or files.

Every mechanism
* validates its parameters on construction (``ConfigError`` naming the key),
* may ``plan`` without data (batch mechanisms: expected error and measurement plan),
* ``run``s against a ``MarginalOracle`` (the only access to private data), charging every release
  to the ``PrivacyLedger`` and drawing every noise sample from the ``NoiseSource``.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privcube.core.context import RunContext
from privcube.core.errors import ConfigError
from privcube.core.oracle import MarginalOracle
from privcube.core.workload import QueryGroup, Workload


@dataclass
class GroupAnswer:
    """Answers to one query group.

    ``estimate`` is 1-D: for a marginal group the cells in C order over ``group.attributes``;
    otherwise one entry per row of the group's query matrix (Kronecker order). ``variance`` has the
    same shape (per-query variance of the estimate) or is None when unknown.
    """

    group: QueryGroup
    estimate: np.ndarray
    variance: np.ndarray | None = None
    published: np.ndarray | None = None  # non-negative, consistent estimate (post-processing; marginal groups)
    #: the noise of the release, for exact intervals (``privcube.privacy.intervals``): its kind
    #: (``gaussian``, ``laplace``, ``discrete-gaussian``, ``discrete-laplace``; None: unknown), whether each
    #: answer is a single noisy draw (then ``noise_scale`` is that draw's parameter: σ² for discrete
    #: Gaussian, t for discrete Laplace), and for Laplace combinations the (answers × draws) matrix of
    #: each draw's scale times its coefficient in the answer (exact quantiles when small enough)
    noise: str | None = None
    single_measurement: bool = False
    noise_scale: Any = None
    noise_coefficients: np.ndarray | None = None


@dataclass
class PlanSummary:
    """Data-independent plan: expected error and what will be measured (``privcube plan --json``)."""

    mechanism: str
    rmse: float
    privacy: dict[str, Any]
    groups: list[dict[str, Any]]
    measurements: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] | None = None  # estimated peak memory (privcube.admission.plan_memory), set by api.plan
    #: the config's one-line warnings (a large delta, a schema inferred from the data, ...), set by ``api.plan``
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "rmse": self.rmse, "privacy": self.privacy, "groups": self.groups,
                "measurements": self.measurements, **({"details": self.details} if self.details else {}),
                **({"memory": self.memory} if self.memory is not None else {}),
                **({"warnings": self.warnings} if self.warnings else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_json_default)

    def to_frame(self) -> Any:
        """The per-group plan as a pandas DataFrame: one row per query group (attributes, queries, weight,
        expected rmse and any other per-group figure the mechanism reports)."""
        import pandas as pd

        return pd.DataFrame([{**g, "attributes": tuple(g.get("attributes", ()))} for g in self.groups])


@dataclass
class MechanismResult:
    """What a run produced: answers per query group, optional records, arrays to persist, a report."""

    answers: list[GroupAnswer]
    report: dict[str, Any] = field(default_factory=dict)
    synthetic: dict[str, Any] = field(default_factory=dict)  # table name -> pandas DataFrame (codes)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # name -> noisy array for store.zarr
    tensor_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> JSON attributes of that array
    #: residual τ -> (z_τ in Decomp form, precision λ_τ): the sufficient statistics of the Gaussian residual
    #: measurements, which post-processing fits (empty: it reads the marginal answers instead)
    residuals: dict[tuple[str, ...], tuple[np.ndarray, float]] = field(default_factory=dict)
    #: the graphical model post-processing fitted (``postprocess: pgm``); the synthesizer samples it
    model: Any = None


class Mechanism(ABC):
    """Base class of every mechanism; subclasses set ``name`` and ``PARAMS`` (key -> default)."""

    name: ClassVar[str]
    PARAMS: ClassVar[Mapping[str, Any]] = {}
    #: one line per key of ``PARAMS`` saying what it does (the reference documentation is generated from it;
    #: ``tests/unit/test_docs_reference.py`` fails when a key has none)
    PARAM_HELP: ClassVar[Mapping[str, str]] = {}
    #: True when every release adds noise to an integer-valued query of the counts (marginals), so the
    #: exact discrete samplers (``noise_sampler: discrete``) are private; mechanisms that release
    #: real-valued strategy answers (B x, A x) keep False and refuse discrete noise up front.
    INTEGER_MEASUREMENTS: ClassVar[bool] = False

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        params = dict(params or {})
        params.pop("name", None)
        unknown = set(params) - set(self.PARAMS)
        if unknown:
            raise ConfigError(
                f"mechanism {self.name!r}: unknown parameter(s) {sorted(unknown)}; "
                f"known: {sorted(self.PARAMS)}"
            )
        self.params = {**self.PARAMS, **params}
        self.given_params = frozenset(params)  # the keys the user set (the rest are defaults)
        self.noise_sampler = "continuous"

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Validate ``params`` as a run would read them (one ConfigError naming the key), without data or a
        budget: the config layer asks the mechanism instead of knowing its parameters. By default the
        mechanism is built, since its constructor checks every key and value."""
        cls(params)

    @classmethod
    def check_budget(cls, params: Mapping[str, Any], privacy: Any, budget: Any) -> None:
        """Refuse (ConfigError) a privacy budget, as written (``privacy``) and parsed (``budget``), that these
        parameters cannot spend as the user asked; every budget passes by default."""

    @classmethod
    def configured_params(cls, params: Mapping[str, Any], postprocess: Any) -> dict[str, Any]:
        """The parameters a job runs with, given its post-processing spec (a default may follow it); by default
        the parameters as given."""
        return dict(params)

    @classmethod
    def report_sections(cls) -> dict[str, Any]:
        """What ``privcube report`` shows for a run of this mechanism (the report asks this instead of testing
        names): ``plan_note``, why a run has no data-free plan (None when :meth:`plan` gives one);
        ``budget``, the section showing how the budget was divided (``budget``: the generic split per
        measurement or ledger charge; ``trace``: the mechanism's selection trace, per round);
        ``residual_rho``, how the ρ of one residual measurement of its plan is read (``p_tau``:
        p_τ/(2σ²) with p_τ = Π(n_i−1)/n_i; ``sigma``: 1/(2σ²))."""
        adaptive = getattr(cls.plan, "__func__", cls.plan) is Mechanism.plan
        note = f"{cls.name} is adaptive: its error depends on the data, so there is no data-free plan"
        return {"plan_note": note if adaptive else None, "budget": "budget", "residual_rho": "sigma"}

    def use_noise_sampler(self, sampler: str) -> None:
        """Declare the run's noise sampler before planning: ``discrete`` is refused (ConfigError) by
        mechanisms whose measurements are not integer-valued, and changes the accounting of others."""
        if sampler == "discrete" and not self.INTEGER_MEASUREMENTS:
            raise ConfigError(
                f"noise_sampler: discrete adds integer noise, which is private only for integer-valued "
                f"measurements, but mechanism {self.name!r} releases real-valued strategy answers; use "
                f"noise_sampler: continuous, or mechanism residual-planner or aim-grem")
        self.noise_sampler = sampler

    def plan(self, workload: Workload, budget: Any) -> PlanSummary:
        """Expected error without data; adaptive mechanisms cannot plan."""
        raise ConfigError(f"mechanism {self.name!r} is adaptive: it has no data-independent plan")

    def plan_noise(self, workload: Workload, budget: Any) -> list[dict[str, Any]]:
        """Per query group, the GroupAnswer noise fields a run will carry (``noise``, ...): the plan's
        interval half-widths are computed from them. Gaussian (or discrete Gaussian) unless overridden."""
        kind = "discrete-gaussian" if self.noise_sampler == "discrete" else "gaussian"
        return [{"noise": kind} for _ in workload]

    @abstractmethod
    def run(self, oracle: MarginalOracle, workload: Workload, budget: Any, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        """Measure the private data through ``oracle`` and answer ``workload``."""


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")
