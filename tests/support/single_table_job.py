"""The single-table job factory: generated people (sex, age, job) with a rich schema and a job config."""
from __future__ import annotations

import numpy as np
import pandas as pd
import yaml

SCHEMA = {"attributes": [
    {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
    {"name": "age", "type": "numeric", "bins": [0, 18, 40, 65, 120]},
    {"name": "job", "type": "integer", "size": 3},
]}


def write_job(tmp_path, mechanism="residual-planner", synthesize=None, workload=None, cluster=None):  # noqa: ANN001, ANN202
    """Generated people (4,000 rows) as Parquet, the rich schema and a job config under ``tmp_path``; returns
    ``(config path, rows)``."""
    rng = np.random.default_rng(0)
    n = 4000
    sex = rng.choice(["F", "M"], n)
    age = np.where(sex == "F", rng.uniform(0, 60, n), rng.uniform(30, 110, n))
    job = (age > 50).astype(int) + rng.integers(0, 2, n)
    pd.DataFrame({"sex": sex, "age": age, "job": job}).to_parquet(tmp_path / "d.parquet", index=False)
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    cfg = {"data": {"path": "d.parquet", "schema": "schema.yaml"}, "mechanism": {"name": mechanism},
           "workload": workload or [{"kway": 2}], "privacy": {"epsilon": 10, "delta": 1e-6},
           "cluster": cluster or {"type": "threads"}}
    if synthesize is not None:
        cfg["synthesize"] = synthesize
    path = tmp_path / f"job-{mechanism}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, n
