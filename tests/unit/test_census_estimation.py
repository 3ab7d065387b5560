"""End to end on a small generated hierarchy (4 states, 20 counties, 200 tracts; attributes of sizes 2, 4, 6;
truth from a Poisson person table; residual measurements per level; state totals exact; one structural zero):
GLS -> non-negative -> controlled rounding, every consistency property exact (issue 35).

Measured over seeds 0-19 (noise variance 5 / 3.33 / 2 at state / county / tract, i.e. a 0.2 / 0.3 / 0.5
budget split): RMSE of the published county tables 1.372 (GLS) vs 1.544 (each level alone, its own
measurements only): 0.889x; tract 1.229 vs 1.286: 0.955x; state 1.591 vs 1.825: 0.872x. After
non-negativity: county 1.367, tract 1.151; after controlled rounding: county 1.464, tract 1.251 (still below
each level alone). 1 cell in 75,700 over the 20 seeds is not the floor or ceiling of its non-negative value
(its parent's integers could not be met by floors and ceilings; re-raked first), none moves by 2 or more."""
from __future__ import annotations

import numpy as np

from census_tables import LEVELS, ZEROS, check_consistent, simulate
from privcube.census.nonnegative import nonnegative_tables
from privcube.census.rounding import controlled_rounding


def _rmse(tables: dict, truth: dict, sets: list) -> float:
    return float(np.sqrt(np.mean(np.concatenate([((tables[s] - truth[s]) ** 2).ravel() for s in sets]))))


def test_gls_beats_each_level_alone_and_every_release_is_consistent() -> None:
    ratios = {lv: ([], [], []) for lv in LEVELS}
    for seed in range(20):
        h, truth, fit, alone = simulate(seed)
        invariants = {"state": truth["state"][()]}
        nn, diag = nonnegative_tables(h, fit, zeros=ZEROS, fixed_totals=invariants)
        check_consistent(h, nn, integer=False, zeros=ZEROS, fixed=invariants)
        assert diag["converged"] and diag["max_residual"] <= 1e-9
        ints, rdiag = controlled_rounding(h, nn, zeros=ZEROS, fixed_totals=invariants)
        check_consistent(h, ints, integer=True, zeros=ZEROS, fixed=invariants)
        assert max(rdiag["max_change"].values()) < 2.0
        off = sum(int(np.count_nonzero((ints[lv][s] != np.floor(nn[lv][s] + 1e-7))
                                       & (ints[lv][s] != np.ceil(nn[lv][s] - 1e-7)))) for lv in ints for s in ints[lv])
        assert off <= 2
        for lv in LEVELS:
            sets = [s for s in alone[lv] if s]
            for out, tables in zip(ratios[lv], (fit[lv], alone[lv], ints[lv])):
                out.append(_rmse(tables, truth[lv], sets))
    gls, each, final = ({lv: np.mean(ratios[lv][i]) for lv in LEVELS} for i in range(3))
    for lv in ("county", "tract"):
        assert gls[lv] < each[lv] and final[lv] < each[lv], (lv, gls[lv], each[lv], final[lv])
    assert gls["county"] / each["county"] < 0.93
