"""What the relational benchmarks share: one timed ``run_relational`` with a seeded noise source, and the
load-average line each prints at the end (the machine may be shared)."""
from __future__ import annotations

import os
import time
from typing import Any


def timed_run(ds: dict, params: dict, budgets: dict, seed: int, **kw: Any) -> tuple[Any, float]:
    """(result, wall seconds) of ``run_relational`` on a generated or loaded data set, noise seeded with ``seed``."""
    from privcube.relational.stages.run import run_relational
    from privcube.privacy.noise import NoiseSource

    t0 = time.perf_counter()
    res = run_relational(ds["tables"], ds["links"], params, budgets, noise=NoiseSource(seed), **kw)
    return res, time.perf_counter() - t0


def load_footer() -> str:
    """The 1-, 5- and 15-minute load averages and the core count."""
    return ("load average (1, 5, 15 min) at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
            + f" on {os.cpu_count()} cores")
