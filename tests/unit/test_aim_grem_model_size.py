"""AIM's model-size filter in aim-grem (``model_cells``): candidates that would grow the junction tree of the
measured cliques past the budget-scaled limit are not selected; the ledger is unchanged by it."""
from __future__ import annotations

import pytest

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.mechanisms.aim_grem.selection import ModelSize
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.synth.junction_tree import clique_cells, min_fill_cliques
from privcube.core.workload import Workload

from test_aim_grem import _oracle


def test_model_size_counts_the_junction_tree_by_hand() -> None:
    size = ModelSize(["a", "b", "c", "d"], {"a": 10, "b": 10, "c": 10, "d": 2})
    assert size.cells_with([]) == 32  # four 1-way tables
    size.add(["a", "b"])
    size.add(["b", "c"])
    assert size.cells_with([]) == 100 + 100 + 2  # {a,b}, {b,c}, {d}
    assert size.cells_with(["a", "c"]) == 1000 + 2  # closes the triangle: {a,b,c}, {d}
    assert size.cells_with(["c", "d"]) == 100 + 100 + 20
    assert size.cells_with(["a", "b"]) == 202  # already in the model
    assert size.allowed([["a", "c"], ["c", "d"], ["b"]], 500).tolist() == [False, True, True]


def _tree_cells(cliques: list[list[str]], dom: Domain) -> float:
    index = {a: i for i, a in enumerate(dom.attributes)}
    edges = sorted({(min(index[u], index[v]), max(index[u], index[v]))
                    for c in cliques for u in c for v in c if u != v})
    return clique_cells(min_fill_cliques(len(dom.attributes), edges, list(dom.shape)), list(dom.shape))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selected_cliques_stay_within_the_model_size(seed: int) -> None:
    oracle = _oracle(n=5000, seed=seed)
    dom = oracle.domain
    workload = Workload.kway(dom, 3)
    budget = PrivacyBudget.from_rho(2.0)
    limits = {}
    for cells in (None, 60):
        ledger = PrivacyLedger(budget)
        params = {"model_cells": cells, "final_round": "select"}
        res = AIMGReM(params).run(oracle, workload, budget, ledger, NoiseSource(seed))
        cliques = [list(r["clique"]) for r in res.report["trace"]]
        limits[cells] = _tree_cells(cliques, dom)
        assert ledger.spent_rho <= 2.0 * (1 + 1e-12) and ledger.spent_rho == pytest.approx(2.0, rel=1e-6)
    assert limits[60] <= 60
    assert limits[None] > 60  # without the filter this workload's model does grow past it


def test_model_cells_is_checked() -> None:
    with pytest.raises(ConfigError, match="model_cells"):
        AIMGReM({"model_cells": 1})
    with pytest.raises(ConfigError, match="model_cells"):
        AIMGReM({"model_cells": True})
