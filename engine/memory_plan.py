"""Peak memory of a single-table job, estimated from its config and plan before any data is read.

A run goes through steps one after the other: counting the marginals (a pass over the data), the
mechanism's releases, its answers, post-processing, synthetic records and writing the outputs. Each
step holds what the previous ones left (e.g. the answers) plus its own working arrays, in the driver
process and in every dask worker. :func:`estimate_peak` sizes each step from public facts only (the
domain, the workload, the mechanism and its parameters, the cluster layout, the input files' sizes and
row-group layout, never a value): the job's peak is the largest step's driver bytes plus its bytes on
every worker. The constants are resident set sizes measured on this code (``benchmarks/memory_estimate.py``
compares the estimate with the measured peak of the whole process tree).
"""
from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from privcube.core.machine import WORKER_BASE, gib

MiB = 2**20
F64 = 8  # bytes of a float64 / int64 cell

#: resident memory of the ``privcube run`` process once its modules are loaded (measured: 200-230 MiB)
DRIVER_BASE = 230 * MiB
#: what a LocalCluster adds to the driver process (scheduler, nannies, comms) and its resource tracker
LOCAL_CLUSTER_DRIVER = 60 * MiB
#: bytes per value (row x attribute) a Parquet partition of the input costs while it is read, encoded and
#: counted (raw column, codes, int64 codes for the flat index)
PARTITION_BYTES_PER_VALUE = 10
PARTITION_BYTES_PER_ROW = 16  # the flat cell index and the bincount's working copy
CSV_BYTES_PER_TEXT_BYTE = 8  # a CSV partition: bytes per byte of its text (strings, codes, flat index)
CSV_BLOCKSIZE = 64 * MiB  # dask's read_csv partitions (an uncompressed file is cut into these)
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst", ".tsv")
COMPRESSION_RATIO = 5  # text bytes per byte of a compressed CSV file (read whole)
DATA_SUFFIXES = (".parquet", ".pq", ".parq") + CSV_SUFFIXES  # the files a data folder is read from
PARQUET_BLOCKSIZE = 256 * MiB  # dask's read_parquet: a file larger than this (uncompressed) is split
PASS_CELLS = 2**25  # cells of one counting pass (privcube.graphs.marginals.DEFAULT_PASS_CELLS)
SPLIT_EVERY = 8  # fan-in of the counting pass's reduction (privcube.graphs.marginals.compute_marginals)
PASS_WORKER_FRACTION = 0.6  # share of a worker's limit a pass is fitted to (privcube.graphs.marginals)
HDMM_CHUNK_CELLS = 2**24  # HDMM measures larger data vectors chunk by chunk (its chunk_cells parameter)
#: float64 arrays of its largest marginal one release holds at once (float copy, noise, residual, temporaries)
RELEASE_ARRAYS = 5
#: float64 arrays of the data vector HDMM holds while it counts, measures A x + noise and reconstructs
HDMM_ARRAYS = 15
#: bytes per answer cell held from the mechanism's answers to the end: estimate and variance
ANSWER_BYTES = 2 * F64
#: copies of the answer tables held while ``answers/`` is written (the pandas frames and Arrow's)
WRITE_COPIES = 3.0
DESCRIPTION_BYTES = 100  # a per-row text description of a non-marginal query (up to 10^6 rows a group)
LABEL_BYTES = 24  # a decoded label column: an object pointer in pandas, the string in Arrow
#: synthetic records: bytes per value (record x attribute) of a chunk being sampled, labelled and written
SYNTH_BYTES_PER_VALUE = 24
SYNTH_CHUNKS_IN_FLIGHT = 4
SYNTH_FIXED = 100 * MiB  # the fitted model and the Parquet writer
#: today's post-processing (engine/postprocess), measured: float64 arrays of the total marginal answer cells it
#: holds at its peak, plus, in the flat solver (problems up to POSTPROCESS_FLAT_MAX_CELLS cells), its sparse
#: operators: bytes per (cell, sub-marginal of its clique) pair, 2^k pairs per cell of a k-way marginal;
#: larger problems go chunk by chunk (POSTPROCESS_CHUNK_CELLS cells at a time)
POSTPROCESS_ARRAYS = 18.0
POSTPROCESS_PAIR_BYTES = 44
POSTPROCESS_CHUNKED_ARRAYS = 16.0
POSTPROCESS_FLAT_MAX_CELLS = 20_000_000
POSTPROCESS_CHUNK_CELLS = 2_000_000


#: the graphical model (``postprocess: pgm``): float64 arrays of its cells held at the fit's peak (potentials
#: at three points, beliefs at two, gradients, messages), and of the published cells (the model's answers and
#: their consistency check), plus the measurements' readings inside the model (at most the answers' cells)
PGM_MODEL_ARRAYS = 16.0
PGM_ANSWER_ARRAYS = 3.0


def postprocess_bytes(cells: int, pairs: int = 0, *, arrays: float = POSTPROCESS_ARRAYS,
                      pair_bytes: float = POSTPROCESS_PAIR_BYTES, chunked_arrays: float = POSTPROCESS_CHUNKED_ARRAYS,
                      flat_max_cells: int = POSTPROCESS_FLAT_MAX_CELLS, method: str = "grem-lnn",
                      model_cells: int = 0) -> int:
    """Peak working memory of post-processing (``published``) marginal answers of ``cells`` cells in all.
    ``pgm``: ``PGM_MODEL_ARRAYS`` arrays of the model's ``model_cells`` (its public bound) and
    ``PGM_ANSWER_ARRAYS`` of the answers' cells. The others, with ``pairs`` (cell, sub-marginal) pairs (a cell
    of a k-way marginal has 2^k): ``arrays`` float64 arrays of the cells plus ``pair_bytes`` per pair up to
    ``flat_max_cells`` cells, ``chunked_arrays`` arrays and one chunk's pairs above. The one place to change
    when post-processing changes."""
    if method == "pgm":
        return int(PGM_MODEL_ARRAYS * F64 * min(model_cells, max(cells, 1) * 4) + PGM_ANSWER_ARRAYS * F64 * cells)
    if cells <= flat_max_cells:
        return int(arrays * F64 * cells + pair_bytes * pairs)
    return int(chunked_arrays * F64 * cells + pair_bytes * pairs * POSTPROCESS_CHUNK_CELLS / cells)


@dataclass(frozen=True)
class Layout:
    """Where a job runs: ``workers`` dask worker processes of ``threads`` threads each, or, with ``workers``
    0, the driver process itself with ``threads`` threads. ``worker_limit``: each worker's memory limit."""

    workers: int = 0
    threads: int = 1
    worker_limit: int | None = None
    kind: str = "in-process"  # in-process | local | remote

    @property
    def distributed(self) -> bool:
        """Whether the data is counted and measured on dask workers (not in the driver)."""
        return self.workers > 0

    @property
    def busy_threads(self) -> int:
        """Threads working at once in one process (at least one)."""
        return max(1, self.threads)


@dataclass(frozen=True)
class Step:
    """One step of a run: resident bytes in the driver and in each worker at its peak, and what dominates."""

    name: str
    driver: int
    worker: int
    what: str = ""


@dataclass
class MemoryEstimate:
    """The steps of one job on one layout; ``peak`` is the largest step's total (driver + every worker)."""

    steps: list[Step]
    layout: Layout
    notes: list[str] = field(default_factory=list)
    plannable: bool = True  # whether `privcube plan` shows it (adaptive mechanisms have no plan)

    def total(self, step: Step) -> int:
        """Bytes of ``step`` over the whole job: the driver plus each worker."""
        return step.driver + self.layout.workers * step.worker

    @property
    def largest(self) -> Step:
        """The step with the largest total."""
        return max(self.steps, key=self.total)

    @property
    def peak(self) -> int:
        """Estimated peak resident memory of the whole job (driver and workers), in bytes."""
        return self.total(self.largest)

    @property
    def driver_peak(self) -> int:
        """Largest driver bytes over the steps."""
        return max(s.driver for s in self.steps)

    @property
    def worker_peak(self) -> int:
        """Largest bytes of one worker over the steps (0 without workers)."""
        return max(s.worker for s in self.steps) if self.layout.workers else 0

    def to_dict(self) -> dict[str, Any]:
        """The estimate as plain data (``privcube plan --json``: ``memory``)."""
        big = self.largest
        return {"peak_bytes": self.peak, "driver_bytes": self.driver_peak, "worker_bytes": self.worker_peak,
                "workers": self.layout.workers, "threads": self.layout.threads, "cluster": self.layout.kind,
                "largest_step": {"name": big.name, "bytes": self.total(big), "what": big.what},
                "steps": [{"name": s.name, "bytes": self.total(s), "driver_bytes": s.driver,
                           "worker_bytes": s.worker, "what": s.what} for s in self.steps],
                **({"notes": list(self.notes)} if self.notes else {})}


def count(n: float) -> str:
    """A count for a message: exact up to a million, else two significant figures (``3.4e9``)."""
    if n < 1e6:
        return f"{int(n):,}"
    mant, exp = f"{n:.1e}".split("e")
    return f"{mant}e{int(exp)}"


# ---------------------------------------------------------------------------------------------- the job
def _closure(domain: Any, cliques: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
    """Every subset of the given attribute sets (domain order), the empty one included."""
    out: set[tuple[str, ...]] = set()
    for c in cliques:
        c = domain.canonical(c)
        for r in range(len(c) + 1):
            out.update(itertools.combinations(c, r))
    return sorted(out, key=lambda t: (len(t), t))


def _maximal(cliques: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The attribute sets not inside another (the roots a counting pass counts); each set is compared with
    the larger ones only."""
    uniq = list(dict.fromkeys(cliques))
    by_size: dict[int, list[frozenset[str]]] = {}
    for c in uniq:
        by_size.setdefault(len(c), []).append(frozenset(c))
    return [c for c in uniq if not any(frozenset(c) < t for k, ts in by_size.items() if k > len(c) for t in ts)]


def factor_rows(factor: Any, domain: Any) -> int:
    """Queries of one Kronecker factor of a group, from its type and sizes (no matrix is formed)."""
    q, sizes = factor.query, [int(domain[a]) for a in factor.attributes]
    n = math.prod(sizes)
    name = q.name
    if name == "identity":
        return n
    if name == "total":
        return 1
    if name == "prefix":
        return n
    if name == "allrange":
        return n * (n + 1) // 2
    if name == "range":
        return max(1, n - int(q.param("width", 1)) + 1)
    if name == "circular":
        return n * n
    if name == "explicit":
        return len(q.param("matrix") or [])
    if name == "random":
        return int(q.param("rows_per_cell", 3)) * n
    if name == "affine":
        return sum(sizes) - 1
    if name == "abs-diff":
        return max(sizes)
    return n


def group_rows(group: Any, domain: Any) -> int:
    """Queries (answer rows) of one query group."""
    return math.prod(factor_rows(f, domain) for f in group.factors) if group.factors else 1


def _cells(domain: Any, clique: Sequence[str]) -> int:
    return math.prod(int(domain[a]) for a in clique)


def _residual_cells(domain: Any, clique: Sequence[str]) -> int:
    return math.prod(int(domain[a]) - 1 for a in clique)


def _labelled(schema: Any) -> set[str]:
    """Attributes whose answers get a ``<attr>_label`` column (a rich schema's non-integer attributes)."""
    if schema is None or not hasattr(schema, "attribute"):
        return set()
    out = set()
    for a in getattr(schema, "names", ()):
        try:
            if getattr(schema.attribute(a), "kind", "integer") != "integer":
                out.add(a)
        except Exception:  # noqa: BLE001 - labels are a convenience; size them as absent
            continue
    return out


def _write_bytes(cfg: Any, rows: Sequence[int], published: bool) -> int:
    """Answer tables held while ``answers/`` is written (all groups' frames, then Arrow's copies)."""
    labelled = _labelled(cfg.schema) if cfg.output.get("labels", True) else set()
    total = 0
    for g, n in zip(cfg.workload, rows):
        floats = 4 + (1 if published and g.is_marginal else 0)  # estimate, variance, ci_low, ci_high (+ published)
        if g.is_marginal:
            per_row = F64 * (len(g.attributes) + floats) + LABEL_BYTES * len(labelled & set(g.attributes))
        else:
            per_row = F64 * (1 + floats) + (DESCRIPTION_BYTES if n <= 1_000_000 else 0)
        total += per_row * n
    return int(WRITE_COPIES * total)


def input_partitions(cfg: Any) -> tuple[int, int, str | None]:
    """``(bytes, count, note)``: what one input partition costs while it is read, encoded and counted, how
    many partitions there are, and a note when they are unknown; from the input's public layout (file
    sizes, Parquet footers' row-group counts), no value is read."""
    n_cols = len(cfg.domain.attributes) + (1 if cfg.privacy_unit is not None else 0)
    per_row = PARTITION_BYTES_PER_VALUE * n_cols + PARTITION_BYTES_PER_ROW
    if cfg.data_frame is not None:
        from privcube.storage.formats.frame import PARTITION_ROWS

        n = len(cfg.data_frame)
        return per_row * min(n, PARTITION_ROWS), max(1, -(-n // PARTITION_ROWS)), None
    paths = cfg.data_path if isinstance(cfg.data_path, list) else [cfg.data_path] if cfg.data_path else []
    files = _local_files(paths)
    if not files:
        return 0, 1, "input partitions not included (no local data files)"
    text = [f for f in files if f.lower().endswith(CSV_SUFFIXES)]
    if text:  # an uncompressed file is cut into blocks; a compressed one is read whole
        sizes = [os.path.getsize(f) for f in text]
        plain = [f.lower().endswith((".csv", ".tsv")) for f in text]
        biggest = max(min(n, CSV_BLOCKSIZE) if p else COMPRESSION_RATIO * n for n, p in zip(sizes, plain))
        parts = sum(max(1, -(-n // CSV_BLOCKSIZE)) if p else 1 for n, p in zip(sizes, plain))
        return int(CSV_BYTES_PER_TEXT_BYTE * biggest), parts, None
    rows, parts = _parquet_partitions(files)
    return per_row * rows, parts, None


def _local_files(paths: Sequence[str]) -> list[str]:
    """The local data files a ``data.path`` names (folders walked for data files as the reader walks them,
    globs expanded); [] for URLs."""
    import glob

    out: list[str] = []
    for p in paths:
        if "://" in str(p) and not str(p).startswith("file://"):
            return []
        p = str(p).removeprefix("file://")
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                out += [os.path.join(root, n) for n in names
                        if not n.startswith((".", "_")) and n.lower().endswith(DATA_SUFFIXES)]
        elif any(ch in p for ch in "*?["):
            out += [f for f in glob.glob(p) if os.path.isfile(f)]
        elif os.path.isfile(p):
            out.append(p)
    return out


def _parquet_partitions(files: Sequence[str], sample: int = 4) -> tuple[int, int]:
    """``(rows of the largest partition, partitions)`` dask makes of these Parquet files: one a file, or
    slices of row groups of about PARQUET_BLOCKSIZE (uncompressed) of a larger file; read from the footers
    of the ``sample`` largest files (metadata only)."""
    import pyarrow.parquet as pq

    rows, splits = 0, 1
    for f in sorted(files, key=os.path.getsize, reverse=True)[:sample]:
        try:
            meta = pq.ParquetFile(f).metadata
        except Exception:  # noqa: BLE001 - not Parquet, unreadable: the run reports it in one line later
            continue
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if size <= PARQUET_BLOCKSIZE or meta.num_row_groups <= 1:
            rows = max(rows, meta.num_rows)
        else:
            biggest_group = max(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
            rows = max(rows, biggest_group, int(meta.num_rows * PARQUET_BLOCKSIZE / size))
            splits = max(splits, -(-size // PARQUET_BLOCKSIZE))
    return rows, len(files) * splits


# ------------------------------------------------------------------------------------------ the estimate
def estimate_peak(config: Any, plan: Any = None, layout: Layout | None = None,
                  partitions: tuple[int, int] | None = None) -> MemoryEstimate:
    """Peak resident memory of a single-table job (a :class:`privcube.config.JobConfig`) on ``layout``
    (default: in this process with one thread per core), step by step. ``plan`` (the mechanism's
    :class:`PlanSummary`, optional) refines HDMM's measurement size; ``partitions`` (bytes of one input
    partition, their number) stand in for the input's (default: :func:`input_partitions`)."""
    cfg = config
    layout = layout or Layout(threads=os.cpu_count() or 1)
    notes: list[str] = []
    if partitions is None:
        part_bytes, n_parts, note = input_partitions(cfg)
        if note:
            notes.append(note)
    else:
        part_bytes, n_parts = partitions
    sz = _Sizes.of(cfg, plan)
    counting, release = _counting_bytes(cfg, sz, layout, part_bytes, n_parts)
    steps = _measure_steps(sz, layout, counting, release) + _output_steps(cfg, sz, layout)
    from privcube.mechanisms import get_mechanism
    from privcube.mechanisms.base import Mechanism

    plannable = getattr(get_mechanism(cfg.mechanism), "plan", None) is not Mechanism.plan
    return MemoryEstimate(steps, layout, notes, plannable)


@dataclass
class _Sizes:
    """What a job counts and holds, in cells and bytes, before any layout is applied."""

    rows: list[int]             # answer rows per workload group
    marginal_cells: int         # cells of the marginal groups (what post-processing makes consistent)
    counted: list[tuple]        # the marginals counted from the data
    roots: list[tuple]          # their maximal sets (one counting pass each)
    root_cells: list[int]
    state: int                  # bytes of the mechanism's measurement state
    release: int                # bytes of one release task
    vector: int                 # cells of HDMM's / eigen-design's data vector (0 for marginal mechanisms)
    exact: int                  # bytes of every exact marginal of the pass, once counted
    big: tuple                  # the largest counted marginal and its cells
    big_cells: int

    @classmethod
    def of(cls, cfg: Any, plan: Any) -> _Sizes:
        domain, workload, mech = cfg.domain, cfg.workload, cfg.mechanism
        rows = [group_rows(g, domain) for g in workload]
        marginal_cells = sum(n for g, n in zip(workload, rows) if g.is_marginal)
        cliques = [domain.canonical(g.attributes) for g in workload]
        if mech in ("hdmm", "eigen-design"):  # one data vector over every attribute the workload touches
            counted = [workload.attributes()]
            state = F64 * _strategy_rows(plan)
            vector = _cells(domain, counted[0])
            release = HDMM_ARRAYS * F64 * vector if mech == "hdmm" else 4 * F64 * vector * vector
        else:  # residual-planner, querysmasher, aim-grem: the downward closure of the workload's marginals
            counted = _closure(domain, cliques)
            resid = sum(_residual_cells(domain, c) for c in counted)
            state = F64 * resid
            if mech == "aim-grem":  # its own sizing of W↓: exact marginals, estimates and residuals
                state = F64 * (2 * sum(_cells(domain, c) for c in counted) + resid)
            release = RELEASE_ARRAYS * F64 * max(_cells(domain, c) for c in counted)
            vector = 0
        roots = _maximal(counted if len(counted) == 1 else list(dict.fromkeys(cliques)))  # the closure's maximal sets
        root_cells = [_cells(domain, r) for r in roots]
        exact = F64 * sum(_cells(domain, c) for c in counted)
        big = max(counted, key=lambda c: _cells(domain, c))
        return cls(rows, marginal_cells, counted, roots, root_cells, state, release, vector, exact, big,
                   _cells(domain, big))

    @property
    def pass_cells(self) -> int:
        return max(max(self.root_cells), min(sum(self.root_cells), PASS_CELLS))


def _counting_bytes(cfg: Any, sz: _Sizes, layout: Layout, part_bytes: int, n_parts: int) -> tuple[int, int]:
    """Bytes of the counting pass (partitions in flight and their partial counts) and of one release task."""
    threads = layout.busy_threads
    running = min(threads, n_parts)  # partitions counted at once, each with its partial counts
    partials = running + (min(n_parts, SPLIT_EVERY) + 1 if n_parts > 1 else 0)  # + those awaiting a combine
    pass_bytes = F64 * sz.pass_cells * partials
    if layout.distributed and layout.worker_limit:  # passes and fan-in fitted to the workers (fit_passes)
        floor = F64 * max(sz.root_cells) * min(partials, 3 + threads)
        pass_bytes = min(pass_bytes, max(floor, int(PASS_WORKER_FRACTION * layout.worker_limit)))
    release = sz.release
    if cfg.mechanism == "hdmm" and sz.vector > int(cfg.mechanism_params.get("chunk_cells", HDMM_CHUNK_CELLS)):
        # counted and measured chunk by chunk as one task graph: only y and x's chunks are held
        release = HDMM_ARRAYS * F64 * HDMM_CHUNK_CELLS * threads + 2 * F64 * sz.vector
    return running * part_bytes + pass_bytes, release


def _bases(layout: Layout) -> tuple[int, int]:
    """Bytes the driver and each worker hold before any work (a LocalCluster's driver holds more)."""
    return (DRIVER_BASE + (LOCAL_CLUSTER_DRIVER if layout.kind == "local" else 0),
            WORKER_BASE if layout.distributed else 0)


def _measure_steps(sz: _Sizes, layout: Layout, counting: int, release: int) -> list[Step]:
    """The count, measure and answers steps."""
    driver0, worker0 = _bases(layout)
    threads = layout.busy_threads
    steps: list[Step] = []
    largest = f"the largest {list(sz.big)} of {count(sz.big_cells)} cells"
    what_count = f"{len(sz.roots)} marginal(s) of {count(sum(sz.root_cells))} cells counted, {largest}"
    if layout.distributed:
        steps.append(Step("count", driver0, worker0 + counting, what_count))
        held = sz.exact // layout.workers + F64 * sz.pass_cells
        steps.append(Step("measure", driver0 + sz.state, worker0 + held + threads * release,
                          f"{len(sz.counted)} measurement(s), {largest}"))
    else:
        steps.append(Step("count", driver0 + counting, 0, what_count))
        steps.append(Step("measure", driver0 + sz.exact + sz.state + release, 0,
                          f"{len(sz.counted)} measurement(s), {largest}"))
    cached = 0 if layout.distributed else sz.exact  # in process, the oracle keeps the exact marginals until the answers
    answers = sum(sz.rows)
    steps.append(Step("answers", driver0 + cached + sz.state + ANSWER_BYTES * answers + 2 * F64 * max(sz.rows, default=0),
                      worker0, f"{count(answers)} answer cells"))
    return steps


def _output_steps(cfg: Any, sz: _Sizes, layout: Layout) -> list[Step]:
    """The postprocess, synthesize and write steps."""
    driver0, worker0 = _bases(layout)
    threads = layout.busy_threads
    answers = sum(sz.rows)
    published = cfg.postprocess is not None and sz.marginal_cells > 0
    held_answers = ANSWER_BYTES * answers + (F64 * sz.marginal_cells if published else 0)
    steps: list[Step] = []
    if published:
        pairs = sum(n * 2 ** len(g.attributes) for g, n in zip(cfg.workload, sz.rows) if g.is_marginal)
        spec = cfg.postprocess
        steps.append(Step("postprocess", driver0 + ANSWER_BYTES * answers + postprocess_bytes(
            sz.marginal_cells, pairs, method=spec.method, model_cells=getattr(spec, "model_cells", 0)),
                          worker0, f"{count(sz.marginal_cells)} marginal cells made consistent"))
    if cfg.synthesize:
        chunk = int(cfg.synthesize.get("chunk_size", 100_000)) * len(cfg.domain.attributes) * SYNTH_BYTES_PER_VALUE
        fit = 2 * F64 * sz.marginal_cells + 8 * F64 * int(cfg.synthesize.get("max_cells") or 0)
        if layout.distributed:
            steps.append(Step("synthesize", driver0 + held_answers + fit + SYNTH_FIXED + chunk,
                              worker0 + SYNTH_FIXED + 2 * threads * chunk, "synthetic records"))
        else:
            steps.append(Step("synthesize", driver0 + held_answers + fit + SYNTH_FIXED
                              + SYNTH_CHUNKS_IN_FLIGHT * chunk, 0, "synthetic records"))
    steps.append(Step("write", driver0 + held_answers + _write_bytes(cfg, sz.rows, published), worker0,
                      f"{count(answers)} answer rows written"))
    return steps


def _strategy_rows(plan: Any) -> int:
    """Rows of the measured strategy from a plan's measurements (0 when unknown)."""
    for m in getattr(plan, "measurements", None) or []:
        if isinstance(m, Mapping) and isinstance(m.get("rows"), (int, float)):
            return int(m["rows"])
    return 0


__all__ = ["Layout", "MemoryEstimate", "Step", "count", "estimate_peak", "factor_rows", "gib", "group_rows",
           "input_partitions", "postprocess_bytes"]
