"""Per-attribute (and two-attribute joint) query types and their explicit matrices.

A query group is the Kronecker product of its factors' matrices, in the group's attribute order.
Conventions follow the QuerySmasher paper (Sec. 7, Table "query types"):

* ``identity`` (marginal cells, n rows), ``total`` (1 row), ``prefix`` (row c = [A <= c], n rows),
  ``allrange`` (every interval [s, e], n(n+1)/2 rows), ``range`` (intervals of fixed ``width``; without
  a width, ``range`` means ``allrange`` as in the HDMM and QuerySmasher papers),
  ``circular`` (start s, length l, cells s..s+l-1 mod n: n^2 rows), ``explicit`` (a user matrix).
* joint over two attributes: ``affine`` (row c = [A_i + A_j <= c]), ``abs-diff``
  (row c = [|A_i - A_j| <= c]), ``random`` (3K Bernoulli(0.3) rows over the K cells, seeded).

``random`` may also stand on one attribute (K = n). Parameters: ``seed`` (default 0), ``p`` (0.3),
``rows_per_cell`` (3), ``generator`` (``pcg64``: numpy ``default_rng``; ``mt19937``: the legacy
``np.random.seed(seed); np.random.rand(...)`` stream the QuerySmasher experiments use) and ``offset``
(uniform draws of that stream to skip first, e.g. the 1-way matrix drawn before the 2-way one).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.errors import WorkloadError
from privcube.core.params import REQUIRED, Param

PER_ATTRIBUTE = ("identity", "total", "prefix", "allrange", "range", "circular", "explicit")
JOINT = ("affine", "abs-diff", "random")
ALIASES = {"marginal": "identity", "all-range": "allrange", "absdiff": "abs-diff", "abs_diff": "abs-diff",
           "ranges": "allrange", "circular-range": "circular"}


@dataclass(frozen=True)
class QueryType:
    """A named query type with hashable parameters (e.g. ``range`` with ``width=5``)."""

    name: str
    params: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def joint(self) -> bool:
        return self.name in JOINT

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def to_config(self) -> str | dict[str, Any]:
        if not self.params:
            return self.name
        out: dict[str, Any] = {"type": self.name}
        for k, v in self.params:
            out[k] = np.asarray(v).tolist() if k == "matrix" else v
        return out

    def __str__(self) -> str:
        shown = ",".join(f"{k}={v}" if k != "matrix" else f"{len(v)}x{len(v[0])}" for k, v in self.params)
        return f"{self.name}({shown})" if shown else self.name


#: one line per query type (the reference documentation is generated from it)
QUERY_TYPE_HELP: dict[str, str] = {
    "identity": "the marginal's cells: one query per code (n rows)",
    "total": "the sum over the attribute (1 row)",
    "prefix": "cumulative counts: row c counts codes <= c (n rows)",
    "allrange": "every interval [s, e] of codes (n(n+1)/2 rows); also written range",
    "range": "{type: range, width: W}: the intervals of W consecutive codes; without width, allrange",
    "circular": "intervals that wrap around (start s, length l, codes s..s+l-1 mod n; n^2 rows)",
    "explicit": "{type: explicit, matrix: [[...], ...]}: your own matrix, one column per code",
    "affine": "joint over two attributes: row c counts A_i + A_j <= c",
    "abs-diff": "joint over two attributes: row c counts |A_i - A_j| <= c",
    "random": "{type: random, seed, p, rows_per_cell, generator, offset}: seeded Bernoulli(p) rows over one "
              "attribute's codes or two attributes' joint cells",
}
#: the parameters each type takes, declared (every other type takes none); the reference is generated from them
PARAMS: dict[str, dict[str, Param]] = {
    "range": {"width": Param(REQUIRED, "int >= 1", "the number of consecutive codes in each interval (at most the "
                                                   "attribute's size); without it, range means allrange")},
    "explicit": {"matrix": Param(REQUIRED, "list of rows", "the query matrix: one row per query, one column per "
                                                           "code (finite numbers)")},
    "random": {
        "seed": Param(0, "int >= 0", "the generator's seed (public: the queries are part of the config)"),
        "p": Param(0.3, "number in (0, 1]", "the probability that a cell is in a query"),
        "rows_per_cell": Param(3, "int >= 1", "queries per cell: rows_per_cell x K rows over the K cells"),
        "generator": Param("pcg64", "pcg64 | mt19937", "pcg64: numpy default_rng(seed); mt19937: the legacy "
                                                        "np.random.seed(seed); np.random.rand stream the "
                                                        "QuerySmasher experiments use (seed below 2**32)"),
        "offset": Param(0, "int >= 0", "uniform draws of the stream to skip first (e.g. the 1-way matrix drawn "
                                       "before the 2-way one, to reproduce a paper's workload)"),
    },
}


def parse_query_type(spec: Any, where: str) -> QueryType:
    """Read a query type from config: a name, or a mapping ``{type: name, **params}``.

    Parameters are checked here (unknown names, types and ranges; a WorkloadError naming the parameter
    and its value); what depends on the attribute's size is checked by :func:`check_size`."""
    if isinstance(spec, QueryType):  # built in Python: checked like a config mapping
        spec = {"type": spec.name, **dict(spec.params)}
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, Mapping):
        params = dict(spec)
        name = params.pop("type", None)
        if not isinstance(name, str):
            raise WorkloadError(f"{where}: a query-type mapping needs a 'type' name, got {spec!r}")
    else:
        raise WorkloadError(f"{where}: query type must be a name or a mapping, got {spec!r}")
    name = ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in PER_ATTRIBUTE + JOINT:
        raise WorkloadError(
            f"{where}: unknown query type {name!r}; known types: {', '.join(PER_ATTRIBUTE + JOINT)}"
        )
    allowed = PARAMS.get(name, ())
    unknown = sorted(str(k) for k in params if k not in allowed)
    if unknown:
        raise WorkloadError(f"{where}: query type {name!r} has no parameter(s) {unknown}; "
                            + (f"it takes {', '.join(allowed)}" if allowed else "it takes none"))
    frozen = []
    for k, v in sorted(params.items()):
        if k == "matrix":
            try:
                m = np.asarray(v, dtype=float)
            except (TypeError, ValueError):
                raise WorkloadError(f"{where}: explicit 'matrix' must be a list of equally long rows of "
                                    f"numbers") from None
            if m.ndim != 2 or 0 in m.shape:
                raise WorkloadError(f"{where}: explicit 'matrix' must be 2-D with at least one row and "
                                    f"column, got shape {m.shape}")
            if not np.all(np.isfinite(m)):
                raise WorkloadError(f"{where}: explicit 'matrix' holds a non-finite entry (nan or inf)")
            v = tuple(tuple(float(x) for x in row) for row in m)
        elif k in ("width", "rows_per_cell"):
            v = _integer(v, 1, f"{where}: query type {name!r}: parameter {k!r}")
        elif k in ("seed", "offset"):
            v = _integer(v, 0, f"{where}: query type {name!r}: parameter {k!r}")
        elif k == "p":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise WorkloadError(f"{where}: query type 'random': parameter 'p' must be a number in (0, 1], "
                                    f"got {v!r}")
            v = float(v)
        elif k == "generator":
            if not isinstance(v, str) or v.lower() not in ("pcg64", "mt19937"):
                raise WorkloadError(f"{where}: query type 'random': parameter 'generator' must be 'pcg64' or "
                                    f"'mt19937', got {v!r}")
            v = v.lower()
        frozen.append((str(k), v))
    if dict(frozen).get("generator") == "mt19937" and dict(frozen).get("seed", 0) >= 2**32:
        raise WorkloadError(f"{where}: query type 'random': generator 'mt19937' takes a seed below 2**32, "
                            f"got {dict(frozen)['seed']}")
    if name == "range" and "width" not in dict(frozen):
        return QueryType("allrange")  # `range` alone means every interval, as in HDMM and QuerySmasher
    if name == "explicit" and "matrix" not in dict(frozen):
        raise WorkloadError(f"{where}: query type 'explicit' needs a 'matrix' parameter")
    return QueryType(name, tuple(frozen))


def _integer(v: Any, low: int, what: str) -> int:
    """``v`` as an int >= ``low`` (an integral float such as 3.0 is accepted); WorkloadError otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v) \
            or int(v) != v or v < low:
        raise WorkloadError(f"{what} must be an integer >= {low}, got {v!r}")
    return int(v)


def check_size(qt: QueryType, n: int, where: str) -> None:
    """Parameters that depend on the attribute's size ``n``: a range ``width`` in [1, n], an explicit
    matrix with n columns (WorkloadError naming ``where``, e.g. the entry and attribute)."""
    if qt.name == "range" and not 1 <= int(qt.param("width")) <= n:
        raise WorkloadError(f"{where}: query type 'range': parameter 'width' is {qt.param('width')}, but must "
                            f"lie in [1, {n}] (the attribute's size)")
    if qt.name == "explicit" and len(qt.param("matrix")[0]) != n:
        raise WorkloadError(f"{where}: explicit matrix has {len(qt.param('matrix')[0])} columns but the "
                            f"attribute has size {n}")


def random_matrix(qt: QueryType, k: int) -> np.ndarray:
    """The seeded Bernoulli(p) matrix of a ``random`` query type over k cells (rows_per_cell·k rows)."""
    default = {key: param.default for key, param in PARAMS["random"].items()}  # the declared defaults
    rows = int(qt.param("rows_per_cell", default["rows_per_cell"])) * k
    p = float(qt.param("p", default["p"]))
    seed = int(qt.param("seed", default["seed"]))
    gen = str(qt.param("generator", default["generator"])).lower()
    offset = int(qt.param("offset", default["offset"]))
    if rows < 1 or not 0 < p <= 1 or offset < 0:
        raise WorkloadError(f"query type 'random': need rows_per_cell >= 1, 0 < p <= 1, offset >= 0; got {qt}")
    if gen == "pcg64":
        rng = np.random.default_rng(seed)
        if offset:
            rng.random(offset)
        u = rng.random((rows, k))
    elif gen == "mt19937":
        rs = np.random.RandomState(seed)
        if offset:
            rs.random_sample(offset)
        u = rs.random_sample((rows, k))
    else:
        raise WorkloadError(f"query type 'random': generator must be 'pcg64' or 'mt19937', got {gen!r}")
    return (u < p).astype(float)


def attribute_matrix(qt: QueryType, n: int) -> np.ndarray:
    """Explicit matrix (rows = queries, columns = the n codes) of a per-attribute query type."""
    if qt.name == "random":
        return random_matrix(qt, n)
    if qt.joint:
        raise WorkloadError(f"query type {qt.name!r} is joint over two attributes")
    if qt.name == "identity":
        return np.eye(n)
    if qt.name == "total":
        return np.ones((1, n))
    if qt.name == "prefix":
        return np.tril(np.ones((n, n)))
    if qt.name == "allrange":
        rows = [(s, e) for s in range(n) for e in range(s, n)]
        return _intervals(rows, n)
    if qt.name == "range":
        w = int(qt.param("width"))
        if not 1 <= w <= n:
            raise WorkloadError(f"range width {w} must lie in [1, {n}]")
        return _intervals([(s, s + w - 1) for s in range(n - w + 1)], n)
    if qt.name == "circular":
        m = np.zeros((n * n, n))
        r = 0
        for s in range(n):
            for length in range(1, n + 1):
                m[r, [(s + j) % n for j in range(length)]] = 1.0
                r += 1
        return m
    if qt.name == "explicit":
        m = np.asarray(qt.param("matrix"), dtype=float)
        if m.shape[1] != n:
            raise WorkloadError(f"explicit matrix has {m.shape[1]} columns but the attribute has size {n}")
        return m
    raise WorkloadError(f"no matrix for query type {qt.name!r}")


def joint_matrix(qt: QueryType, n1: int, n2: int) -> np.ndarray:
    """Explicit matrix over the n1*n2 cells (C order) of a two-attribute joint query type."""
    a = np.repeat(np.arange(n1), n2)
    b = np.tile(np.arange(n2), n1)
    if qt.name == "affine":
        return (a[None, :] + b[None, :] <= np.arange(n1 + n2 - 1)[:, None]).astype(float)
    if qt.name == "abs-diff":
        return (np.abs(a - b)[None, :] <= np.arange(max(n1, n2))[:, None]).astype(float)
    if qt.name == "random":
        return random_matrix(qt, n1 * n2)
    raise WorkloadError(f"query type {qt.name!r} is not joint")


def row_descriptions(qt: QueryType, names: tuple[str, ...], sizes: tuple[int, ...],
                     values: tuple[list[str] | None, ...] | None = None) -> list[str]:
    """One readable description per row of a factor's matrix, in row order (e.g. ``age <= 30``).

    ``values`` gives per attribute the label of each code (a schema's categories or bin ranges);
    codes are used where it is None. Joint types are described on codes (``a + b <= 3``)."""
    values = values or (None,) * len(names)

    def v(i: int) -> str:
        return str(values[0][i]) if values[0] is not None else str(i)

    if qt.joint and len(names) == 2:
        a, b = names
        if qt.name == "affine":
            return [f"{a} + {b} <= {c}" for c in range(sizes[0] + sizes[1] - 1)]
        if qt.name == "abs-diff":
            return [f"|{a} - {b}| <= {c}" for c in range(max(sizes))]
        return [f"{a},{b}: {qt.name} row {r}" for r in range(int(qt.param("rows_per_cell", 3)) * sizes[0] * sizes[1])]
    (a,), (n,) = names, sizes
    if qt.name == "identity":
        return [f"{a} = {v(i)}" for i in range(n)]
    if qt.name == "total":
        return [f"{a}: all"]
    # half-open bins "[lo, hi)" (a schema's numeric/date bins, then "missing" as the last code when it is
    # coded): codes s..e are "lo_s <= a < hi_e", plus "or missing" when e is the missing code
    bins = [_bin(values[0][i]) for i in range(n)] if values[0] is not None else [None] * n
    last = n - 1 if n > 1 and values[0] is not None and str(values[0][-1]) == "missing" and bins[-2] else None

    def upto(s: int, e: int) -> tuple[str, str, str] | None:
        """(lo_s, hi of the last bin in s..e, " or missing" or "") when codes s..e are bins (+ missing)."""
        tail = " or missing" if e == last and s < e else ""
        top = e - 1 if tail else e
        return (bins[s][0], bins[top][1], tail) if bins[s] and bins[top] else None

    if qt.name == "prefix":  # codes 0..c
        return [f"{a} < {u[1]}{u[2]}" if (u := upto(0, c)) else f"{a} <= {v(c)}" for c in range(n)]
    if qt.name in ("allrange", "range"):
        w = int(qt.param("width", 0))
        rows = [(s, e) for s in range(n) for e in range(s, n)] if qt.name == "allrange" else \
            [(s, s + w - 1) for s in range(n - w + 1)]
        return [f"{a} in [{u[0]}, {u[1]}){u[2]}" if (u := upto(s, e)) else f"{a} in [{v(s)}, {v(e)}]"
                for s, e in rows]
    if qt.name == "circular":
        return [f"{a} in [{v(s)}, {v((s + length - 1) % n)}] (circular)" for s in range(n) for length in range(1, n + 1)]
    rows = (int(qt.param("rows_per_cell", PARAMS["random"]["rows_per_cell"].default)) * n if qt.name == "random"
            else len(qt.param("matrix")))
    return [f"{a}: {qt.name} row {r}" for r in range(rows)]


def _bin(label: Any) -> tuple[str, str] | None:
    """(lo, hi) of a bin label ``"[lo, hi)"`` (a schema's numeric or date bin), None for other labels."""
    text = str(label)
    if text.startswith("[") and text.endswith(")") and text.count(", ") == 1:
        lo, hi = text[1:-1].split(", ")
        return lo, hi
    return None


def _intervals(rows: list[tuple[int, int]], n: int) -> np.ndarray:
    m = np.zeros((len(rows), n))
    for r, (s, e) in enumerate(rows):
        m[r, s : e + 1] = 1.0
    return m
