"""The audit suite: each mechanism as a job runs it, on small neighbouring datasets chosen to be the
worst case for the stated neighbour relation (``privcube audit``; :mod:`privcube.audit.runner`).

Every single-table case is a job config (mechanism, parameters, workload, ``privacy``, ``noise_sampler``,
``privacy_unit``, ``synthesize``) loaded by :func:`privcube.config.load_config` and run as
``SingleTableJob`` runs it: ``build_mechanism`` → ``mechanism.run`` against the exact counts → the ledger
(per person under a privacy unit) → ``postprocess`` and ``write_records`` for the pipeline case. The claim
is the ledger's ε at the budget's δ (a pure ε budget: δ = 0). Budgets are small on purpose (ρ = 0.5, i.e.
ε 2.75 at δ = 0.01): a claim this small is one an audit of a few thousand runs can contradict, so a mechanism
that leaks more than it charges fails (the deliberately broken variants in tests/integration/test_privacy_audit.py do).

Neighbouring pairs (the adversary's choice):
- add/remove one record: D plus one record. For ResidualPlanner every cell is as exposed as any other
  (each residual moves by p_τ in norm whichever cell), so one is enough; matrix mechanisms (QuerySmasher,
  HDMM, Eigen-Design) get every cell as a candidate and a pilot (common seeds) picks the cell whose
  outputs move most in the discriminant's metric.
- substitution (``neighbours: substitution``): one record moved to each other cell, pilot-picked.
- a person (``privacy_unit: {max_rows: K}``): a new person with 3K rows, all in one cell (the largest
  L2 change K rows can make, and more rows than the bound so that a bound not enforced shows).
- aim-grem's selection: a dataset on which, with the noise-free scores, the round-1 choice between two
  workload marginals flips when one record is added (the scores' L1 errors are exact integers there: the
  GReM estimate of an unmeasured 2×2 interaction is additive, so its error is Σ diagonal − Σ off-diagonal).
- relational links (bounded DP: one row's values and all its links change): one left record's links
  moved to right records of the other code.
"""
from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privcube.audit.runner import Case, Outcome

#: the audit's δ for zCDP budgets: large enough that the ledger's claim is one a few thousand trials can
#: contradict (ρ 0.5 reads as ε 2.75 at δ 0.01), small enough to be a meaningful (ε, δ) statement
AUDIT_DELTA = 0.01
GAUSSIAN = {"rho": 0.5, "delta": AUDIT_DELTA}
PURE = {"epsilon": 1.0}


# ----------------------------------------------------------------------------------------- noise sources
def continuous_noise(entropy: int) -> Any:
    """The release noise source (unseeded path: SHAKE-256 CSPRNG streams) keyed by ``entropy``."""
    from privcube.privacy.noise import NoiseSource

    return NoiseSource.from_state({"entropy": entropy, "seed": None})


def discrete_noise(entropy: int) -> Any:
    """The exact discrete samplers' source (SHAKE-256 DRBG per measurement) keyed by ``entropy``."""
    from privcube.privacy.discrete import DiscreteNoiseSource

    return DiscreteNoiseSource.from_state({"entropy": entropy, "seed": None})


# --------------------------------------------------------------------------------------------- features
def answer_features(result: Any) -> np.ndarray:
    """Every released answer (estimate), group after group."""
    return np.concatenate([np.asarray(a.estimate, dtype=float).ravel() for a in result.answers])


def selection_features(result: Any, domain: Any, max_size: int = 3) -> np.ndarray:
    """An adaptive run's public selection trace: how often each clique was selected, and the first choice
    (one-hot), over every clique of up to ``max_size`` attributes."""
    import itertools

    attrs = list(domain.attributes)
    universe = [c for k in range(1, max_size + 1) for c in itertools.combinations(attrs, k)]
    index = {c: i for i, c in enumerate(universe)}
    counts, first = np.zeros(len(universe)), np.zeros(len(universe))
    chosen = [tuple(domain.canonical(r["clique"])) for r in (result.report or {}).get("trace", []) if r.get("clique")]
    for c in chosen:
        if c in index:
            counts[index[c]] += 1
    if chosen and chosen[0] in index:
        first[index[chosen[0]]] = 1.0
    return np.concatenate([counts, first])


def noise_kind(cfg: Any) -> str:
    """The table's noise column: laplace (pure ε budgets of hdmm / eigen-design), discrete-gaussian or gaussian."""
    if cfg.mechanism in ("hdmm", "eigen-design") and (cfg.budget.pure or cfg.mechanism_params.get("noise") == "laplace"):
        return "laplace"
    return "discrete-gaussian" if cfg.noise_sampler == "discrete" else "gaussian"


# ------------------------------------------------------------------------------------- single-table cases
class _Folder:
    """Stands in for a run folder for ``write_records``: the records are sampled and written to a temporary
    folder exactly as a run writes them, then read back (``records``) and the folder removed."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="privcube-audit-"))
        self.records: Any = None

    def has(self, name: str) -> bool:
        return False

    def write_folder(self, name: str, fill: Callable[[Path], Any]) -> Any:
        import pandas as pd

        staging = self.path / "records"
        try:
            out = fill(staging)
            parts = sorted(staging.glob("*.parquet"))
            self.records = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True) if parts else None
        finally:
            shutil.rmtree(self.path, ignore_errors=True)
        return out


def single_table_case(key: str, config: Mapping[str, Any], first: Any, seconds: Sequence[tuple[str, Any]], *,
                      trials: Mapping[str, int], neighbours: str = "add/remove one record", pilot: int = 60,
                      pipeline: bool = False, mechanism: Callable[[Any], Any] | None = None,
                      fast_suite: bool = False) -> Case:
    """A case from a job config mapping (inline ``domain``, no data): datasets are (N × d) code arrays in the
    domain's attribute order, or, under ``privacy_unit``, pandas frames of codes plus the person id column
    (``privcube.storage.contribution.ID_COLUMN``). ``pipeline`` adds post-processing and synthetic records
    (the config's ``synthesize``) to each run, whose features are then the published answers and the
    records' histogram. ``mechanism(cfg)`` builds the mechanism (default: as a job does, ``build_mechanism``)."""
    from privcube.config import load_config

    cfg = load_config(dict(config), need_data=False)
    kind = noise_kind(cfg)
    held: dict[str, Any] = {}

    def build() -> Any:
        if "mech" not in held:
            if mechanism is None:
                from privcube.jobs.single_table import build_mechanism

                held["mech"] = build_mechanism(cfg)
            else:
                held["mech"] = mechanism(cfg)
                held["mech"].use_noise_sampler(cfg.noise_sampler)
        return held["mech"]

    def run(dataset: Any, noise: Any) -> Outcome:
        from privcube.core.oracle import ArrayOracle
        from privcube.privacy.ledger import PrivacyLedger

        mech = build()
        records = _bounded(dataset, cfg, noise)
        ledger = PrivacyLedger(cfg.mechanism_budget)
        result = mech.run(ArrayOracle(cfg.domain, records), cfg.workload, cfg.mechanism_budget, ledger, noise)
        if cfg.privacy_unit is not None:  # the guarantee is per person: every charge rescaled (ρ K², ε K)
            ledger = cfg.privacy_unit.person_ledger(ledger, cfg.budget)
        claim = float(ledger.spent["epsilon"])
        if pipeline:
            return Outcome(_pipeline_features(cfg, mech, result, noise), claim)
        feats = answer_features(result)
        if (result.report or {}).get("trace") is not None:
            feats = np.concatenate([feats, selection_features(result, cfg.domain)])
        return Outcome(feats, claim)

    return Case(key, cfg.mechanism + (" + postprocess + synthesize" if pipeline else ""), kind, neighbours,
                0.0 if cfg.budget.pure else cfg.budget.delta, run,
                discrete_noise if cfg.noise_sampler == "discrete" else continuous_noise, first, list(seconds),
                dict(trials), pilot, {"config": dict(config)}, fast_suite)


def _bounded(dataset: Any, cfg: Any, noise: Any) -> np.ndarray:
    """The records the mechanism counts: the dataset itself, or under a privacy unit the rows each person
    keeps, chosen by ``truncate_per_id``'s per-partition step (every id's rows are in the one partition here,
    which is what its shuffle guarantees) with the run's keyed hash."""
    if cfg.privacy_unit is None:
        return np.asarray(dataset)
    from privcube.storage import contribution

    names = list(cfg.domain.attributes)
    kept = contribution._keep_k(dataset, names, cfg.privacy_unit.max_rows, contribution.hash_key_from(noise))
    return kept[names].to_numpy(dtype=np.int64)


def _pipeline_features(cfg: Any, mech: Any, result: Any, noise: Any) -> np.ndarray:
    """Post-processing (``published`` answers) and synthetic records, as a run makes them; features: the
    published answers, the records' counts per cell of the full domain, and their number."""
    from privcube.jobs.derived import postprocess, write_records

    postprocess(cfg, mech, result)
    published = np.concatenate([np.asarray(a.published if a.published is not None else a.estimate,
                                           dtype=float).ravel() for a in result.answers])
    folder = _Folder()
    write_records(cfg, result, folder, noise, None)
    names = list(cfg.domain.attributes)
    hist = np.zeros(int(np.prod(cfg.domain.shape)))
    rows = 0
    if folder.records is not None and len(folder.records):
        codes = folder.records[names].to_numpy(dtype=np.int64)
        hist = np.bincount(np.ravel_multi_index(tuple(codes.T), cfg.domain.shape), minlength=hist.size).astype(float)
        rows = len(codes)
    return np.concatenate([published, hist, [float(rows)]])


def _plus(records: np.ndarray, *rows: Sequence[int]) -> np.ndarray:
    return np.vstack([records, np.asarray(rows, dtype=np.int64)])


def _cells(shape: Sequence[int]) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in idx) for idx in np.ndindex(*shape)]


# ------------------------------------------------------------------------------------------ the datasets
#: two binary attributes; D has no record in cell (0, 0)
BASE2 = np.array([[0, 1], [1, 0], [1, 1], [0, 1], [1, 0], [1, 1]], dtype=np.int64)
#: a: 4 values (prefix queries), b: 2
BASE42 = np.array([[1, 0], [2, 1], [3, 0], [0, 1], [2, 0], [3, 1]], dtype=np.int64)
#: three binary attributes, some correlation (AIM has something to select)
BASE3 = np.array([[0, 0, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1]] * 3,
                 dtype=np.int64)


def unit_frame(records: np.ndarray, ids: Sequence[str], names: Sequence[str]) -> Any:
    """Codes plus the person id column, as ``open_with_id`` makes them."""
    import pandas as pd

    from privcube.storage.contribution import ID_COLUMN

    frame = pd.DataFrame(np.asarray(records, dtype=np.int64), columns=list(names))
    frame[ID_COLUMN] = np.asarray([str(i) for i in ids], dtype=object)
    return frame


def unit_pair(max_rows: int, names: Sequence[str] = ("a", "b")) -> tuple[Any, Any]:
    """D: four people with 1–2 rows each; D': the same plus one person with 3·max_rows rows in cell (0, 0)."""
    people = ["p1", "p1", "p2", "p3", "p3", "p4"]
    first = unit_frame(BASE2, people, names)
    extra = 3 * max_rows
    second = unit_frame(np.vstack([BASE2, np.zeros((extra, 2), dtype=np.int64)]), people + ["new"] * extra, names)
    return first, second


def selection_flip_pair(config: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """aim-grem's round-1 selection between the workload marginals (a, b) (weight 1) and (c, d) (weight 1.5)
    of four binary attributes: with noise-free scores it picks (a, b) on D and (c, d) on D' = D + (0, 1, 0, 0).

    Score_γ = w_γ(‖μ_γ − μ̂_γ‖₁ − √(2/π)σ₁n_γ) (w_ab = 2, w_cd = 3, n_γ = 4, σ₁ the round's public noise
    scale). With only the 1-way residuals measured, μ̂_γ is additive, so on tables with heavy diagonals the
    L1 error is exactly Σ diagonal − Σ off-diagonal =: A (a, b) and C (c, d), whatever the noise; the added
    record lowers A by 1 and raises C by 1, moving Score_ab − Score_cd = 2A − 3C + 4√(2/π)σ₁ by −5 (the
    largest change one record can make: sensitivity 3 per score). D is chosen to put that difference as
    near +2.5 as the integers allow, so the noise-free choice flips with a margin of about 2.5 either way."""
    from privcube.config import load_config
    from privcube.mechanisms.aim_grem.annealing import initial_budget

    cfg = load_config(dict(config), need_data=False)
    k = 6  # candidates a, b, c, d, (a,b), (c,d)
    sigma1 = math.sqrt(1.0 / (2.0 * initial_budget(cfg.budget.rho, k).rho_measure))
    shift = 4.0 * math.sqrt(2.0 / math.pi) * sigma1
    n = 200
    ab = [[90, 10], [10, 90]]  # A = 160
    a_err = 160
    c_err = min(range(0, n + 1, 2), key=lambda c: abs(2 * a_err - 3 * c + shift - 2.5))
    diag = (n + c_err) // 2  # (c, d): diagonal and off-diagonal totals, C = diag − off
    off = n - diag
    cd = [[diag - diag // 2, off // 2], [off - off // 2, diag // 2]]
    pairs_ab = [(i, j) for i in range(2) for j in range(2) for _ in range(ab[i][j])]
    pairs_cd = [(i, j) for i in range(2) for j in range(2) for _ in range(cd[i][j])]
    first = np.array([[*p, *q] for p, q in zip(pairs_ab, pairs_cd)], dtype=np.int64)
    return first, _plus(first, (0, 1, 0, 0))


def relational_case(key: str = "relational", *, trials: Mapping[str, int], rho: float = 0.5,
                    delta: float = AUDIT_DELTA, discrete: bool = False) -> Case:
    """The links stage of ``relational`` (the tables are supplied, so only the links budget is spent): eight
    users (code g) and six movies (code h), two links per user, d_max 3; D' moves user 0's two links from
    movies with h = 0 to movies with h = 1. Features: the synthetic links' counts per (g, h)."""
    import pandas as pd

    from privcube.core.domain import Domain

    users = pd.DataFrame({"id": np.arange(8) + 100, "g": [0, 0, 0, 0, 1, 1, 1, 1]})
    movies = pd.DataFrame({"id": np.arange(6) + 500, "h": [0, 0, 0, 1, 1, 1]})
    tables = {"users": (users, Domain(("g",), (2,))), "movies": (movies, Domain(("h",), (2,)))}
    base = [(0, 0), (0, 1), (1, 1), (1, 3), (2, 2), (2, 4), (3, 0), (3, 5), (4, 3), (4, 4), (5, 2), (5, 5),
            (6, 0), (6, 3), (7, 1), (7, 2)]
    moved = [(0, 4), (0, 5)] + base[2:]

    def links(pairs: list[tuple[int, int]]) -> dict[str, Any]:
        frame = pd.DataFrame({"user_id": [u + 100 for u, _ in pairs], "movie_id": [m + 500 for _, m in pairs]})
        return {"pairs": frame, "left": "users.id", "right": "movies.id", "columns": ["user_id", "movie_id"]}

    params = {"d_max": 3, "k": 2, "iterations": 2, "pgd_iters": 20}

    def run(dataset: Any, noise: Any) -> Outcome:
        from privcube.relational.stages.run import run_relational
        from privcube.privacy.budget import PrivacyBudget
        from privcube.privacy.ledger import PrivacyLedger

        budget = PrivacyBudget.from_rho(rho, delta)
        ledger = PrivacyLedger(budget)
        res = run_relational(tables, dataset, params, {"links": {"rho": rho, "delta": delta}}, ledger, noise,
                             synthetic_tables={"users": users, "movies": movies})
        left, right = res.links.iloc[:, 0].to_numpy(), res.links.iloc[:, 1].to_numpy()
        g = res.tables["users"]["g"].to_numpy()[left]
        h = res.tables["movies"]["h"].to_numpy()[right]
        counts = np.bincount(g * 2 + h, minlength=4).astype(float)
        return Outcome(counts, float(ledger.spent["epsilon"]))

    return Case(key, "relational", "discrete-gaussian" if discrete else "gaussian", "change one row's links (bounded)",
                delta, run, discrete_noise if discrete else continuous_noise,
                links(base), [("user 0's links to the other movie code", links(moved))], dict(trials), 60,
                {"params": params, "rho_links": rho})


# ---------------------------------------------------------------------------------------------- the suite
def _config(mechanism: Any, workload: Any, privacy: Mapping[str, Any], domain: Mapping[str, int], **extra: Any
            ) -> dict[str, Any]:
    return {"domain": dict(domain), "mechanism": mechanism, "workload": workload, "privacy": dict(privacy), **extra}


D2 = {"a": 2, "b": 2}
D42 = {"a": 4, "b": 2}
D3 = {"a": 2, "b": 2, "c": 2}
D4 = {"a": 2, "b": 2, "c": 2, "d": 2}
PREFIX = [{"attributes": ["a", "b"], "queries": {"a": "prefix", "b": "identity"}}]
SELECTION = _config({"name": "aim-grem", "max_rounds": 1, "selection_on": "measured"},
                    [{"attributes": ["a", "b"]}, {"attributes": ["c", "d"], "weight": 1.5}], GAUSSIAN, D4)


def suite() -> list[Case]:
    """Every case of ``privcube audit`` (each with its trials per dataset for ``--fast`` and ``--all``)."""
    add2 = [("add (0, 0)", _plus(BASE2, (0, 0)))]
    every42 = [(f"add {c}", _plus(BASE42, c)) for c in _cells((4, 2))]
    moved = [(f"move (0, 1) to {c}", np.vstack([BASE2[1:], [c]])) for c in _cells((2, 2)) if c != (0, 1)]
    sel_first, sel_second = selection_flip_pair(SELECTION)
    unit_first, unit_second = unit_pair(2)
    kway2 = [{"kway": 2}]
    cases = [
        single_table_case("rp", _config("residual-planner", kway2, GAUSSIAN, D2), BASE2, add2,
                          trials={"fast": 1000, "all": 4000}, fast_suite=True),
        single_table_case("rp-discrete", _config("residual-planner", kway2, GAUSSIAN, D2, noise_sampler="discrete"),
                          BASE2, add2, trials={"fast": 1000, "all": 4000}, fast_suite=True),
        single_table_case("rp-substitution", _config({"name": "residual-planner", "neighbours": "substitution"}, kway2,
                                                     GAUSSIAN, D2), BASE2, moved,
                          trials={"fast": 1000, "all": 4000}, neighbours="substitution (one record changed)"),
        single_table_case("rp-unit", _config("residual-planner", kway2, GAUSSIAN, D2,
                                             privacy_unit={"id": "person", "max_rows": 2}),
                          unit_first, [("add a person with 6 rows in (0, 0)", unit_second)],
                          trials={"fast": 1000, "all": 4000}, neighbours="add/remove one person (max_rows 2)",
                          fast_suite=True),
        single_table_case("qs", _config("querysmasher", PREFIX, GAUSSIAN, D42), BASE42, every42,
                          trials={"fast": 1000, "all": 4000}),
        single_table_case("hdmm", _config({"name": "hdmm", "restarts": 1}, PREFIX, GAUSSIAN, D42), BASE42, every42,
                          trials={"fast": 1000, "all": 4000}),
        single_table_case("hdmm-laplace", _config({"name": "hdmm", "restarts": 1, "noise": "laplace"}, PREFIX, PURE, D42),
                          BASE42, every42, trials={"fast": 1000, "all": 4000}, fast_suite=True),
        single_table_case("eigen", _config("eigen-design", PREFIX, GAUSSIAN, D42), BASE42, every42,
                          trials={"fast": 1000, "all": 4000}),
        single_table_case("eigen-laplace", _config({"name": "eigen-design", "noise": "laplace"}, PREFIX, PURE, D42),
                          BASE42, every42, trials={"fast": 1000, "all": 4000}),
        single_table_case("aim-selection", SELECTION, sel_first, [("add (0, 1, 0, 0): round-1 choice flips", sel_second)],
                          trials={"fast": 500, "all": 2000}, fast_suite=True),
        single_table_case("aim", _config("aim-grem", kway2, GAUSSIAN, D3), BASE3, [("add (0, 1, 0)", _plus(BASE3, (0, 1, 0)))],
                          trials={"fast": 500, "all": 2000}),
        single_table_case("aim-discrete", _config("aim-grem", kway2, GAUSSIAN, D3, noise_sampler="discrete"), BASE3,
                          [("add (0, 1, 0)", _plus(BASE3, (0, 1, 0)))], trials={"fast": 500, "all": 2000}),
        relational_case(trials={"fast": 200, "all": 1000}),
        relational_case("relational-discrete", trials={"fast": 200, "all": 1000}, discrete=True),
        single_table_case("pipeline", _config("residual-planner", kway2, GAUSSIAN, D2, synthesize={"rows": "auto"}),
                          BASE2, add2, trials={"fast": 300, "all": 1000}, pipeline=True, fast_suite=True),
    ]
    return cases


#: names ``--mechanism`` accepts: the mechanisms, and ``pipeline`` (residual-planner + post-processing +
#: synthetic records)
NAMES = ("residual-planner", "querysmasher", "hdmm", "eigen-design", "aim-grem", "relational", "pipeline")


def select(cases: Sequence[Case], names: Sequence[str] | None) -> list[Case]:
    """The cases of the named mechanisms (``pipeline``: the post-processing + synthesizer case); all when none."""
    from privcube.core.errors import ConfigError

    if not names:
        return list(cases)
    bad = [n for n in names if n not in NAMES]
    if bad:
        raise ConfigError(f"audit: --mechanism {bad[0]!r} is not audited; choose from {', '.join(NAMES)}")
    wanted = set(names)
    return [c for c in cases if ("pipeline" if "synthesize" in c.mechanism else c.mechanism) in wanted]


__all__ = ["AUDIT_DELTA", "GAUSSIAN", "NAMES", "PURE", "answer_features", "continuous_noise", "discrete_noise",
           "relational_case", "select", "selection_features", "selection_flip_pair", "single_table_case", "suite",
           "unit_frame", "unit_pair"]
