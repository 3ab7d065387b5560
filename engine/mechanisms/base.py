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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privcube.errors import ConfigError
from privcube.oracle import MarginalOracle
from privcube.workload import QueryGroup, Workload


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


@dataclass
class PlanSummary:
    """Data-independent plan: expected error and what will be measured (``privcube plan --json``)."""

    mechanism: str
    rmse: float
    privacy: dict[str, Any]
    groups: list[dict[str, Any]]
    measurements: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "rmse": self.rmse, "privacy": self.privacy, "groups": self.groups,
                "measurements": self.measurements, **({"details": self.details} if self.details else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_json_default)


@dataclass
class MechanismResult:
    """What a run produced: answers per query group, optional records, arrays to persist, a report."""

    answers: list[GroupAnswer]
    report: dict[str, Any] = field(default_factory=dict)
    synthetic: dict[str, Any] = field(default_factory=dict)  # table name -> pandas DataFrame (codes)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # name -> noisy array for store.zarr
    tensor_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> JSON attributes of that array


@dataclass
class RunContext:
    """Services a run may use; all optional. ``client`` is a dask Client (or None for local)."""

    client: Any = None
    checkpoint: Any = None  # an object with save(round, state) / load() (see privcube.storage.checkpoint)
    progress: Callable[[str, float], None] | None = None
    resume: bool = False


class Mechanism(ABC):
    """Base class of every mechanism; subclasses set ``name`` and ``PARAMS`` (key -> default)."""

    name: ClassVar[str]
    PARAMS: ClassVar[Mapping[str, Any]] = {}
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
