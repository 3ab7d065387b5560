"""Workloads of the QuerySmasher paper's real-data tables, from its schemas (domain sizes only: RMSE is
data-independent).

Table 3 (digest §2, "Table 3 fallback", the authors' experiment code): 1-way prefix on numeric and
identity on categorical attributes, plus every pair with the joint type (affine or abs-diff) when
(d_i − 1)(d_j − 1) ≤ 5000, else the Kronecker hybrid prefix/identity. The paper's #Queries and WFF
column pin this definition down.
"""
from __future__ import annotations

from privcube.core.domain import Domain
from privcube.core.workload import Workload, hybrid_joint

#: paper §8.3 schemas: (numeric, categorical) attribute sizes
TABLE3_SCHEMAS: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "CPS": ({"income": 50, "age": 100}, {"marital": 7, "race": 4, "sex": 2}),
    "Adult": ({"age": 85, "fnlwgt": 100, "capital-gain": 100, "capital-loss": 100, "hours-per-week": 99},
              {"native-country": 42, "education-num": 16, "occupation": 15, "workclass": 9,
               "marital-status": 7, "relationship": 6, "race": 5, "sex": 2, "income>50K": 2}),
    "Loans": ({"n1": 101, "n2": 101, "n3": 101, "n4": 101},
              {"c51": 51, "c36": 36, "c15": 15, "c8": 8, "c6": 6, "c5": 5, "c4": 4, "c3": 3}),
}


def table3_workload(name: str, query: str) -> Workload:
    """The Table 3 workload on schema ``name`` (CPS, Adult, Loans) with joint type ``query``."""
    numeric, categorical = TABLE3_SCHEMAS[name]
    sizes = {**numeric, **categorical}
    return hybrid_joint(Domain(tuple(sizes), tuple(sizes.values())), numeric, query, limit=5000)
