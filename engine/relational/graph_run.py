"""A schema graph of several tables linked by foreign keys (list form of ``data.links``), run as one job.

Stage 1: each table is synthesized once on its own budget (ledger label ``table:<name>:…``), or, when
``privacy.tables`` marks it ``public``, its real codes are released as they are (no charge) in a random order
with new keys (``unlinkable_order``: neither a row's position nor its key says which input row it was). Stage 2:
each link ``CHILD.fk -> PARENT.key`` runs ``run_relational`` on the already synthetic tables (given as
``synthetic_tables=``, so nothing is charged twice) with its own budget ``privacy.links[CHILD.fk]``; its
charges go to the run's ledger as ``link:CHILD.fk:…`` and its noise comes from a stream of its own. A
many-to-many link table ``LEFT.key-RIGHT.key`` runs the same way on its two synthetic tables (budget and
ledger labels under that name) and yields (left id, right id) pairs instead of a column.
The ledger's budget is the basic composition of the parts (Σε, Σδ; Σρ enforced). The run's
checkpoint is committed after each table and each link (``--resume`` replays its charges; an unfinished
link restarts). Synthetic ids are row positions 0..n-1 of each synthetic table, so every child's FK is a
key of the synthetic parent.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import ConfigError
from privcube.relational.config import RelationalJob
from privcube.relational.schema_graph import link_name


class LinkLedger:
    """The run's ledger as one link's ``run_relational`` sees it: charges labelled ``link:<from>:<label>``."""

    def __init__(self, ledger: Any, name: str) -> None:
        """Charges of link ``name`` (its ``from``) forwarded to ``ledger``."""
        self.ledger, self.prefix = ledger, f"link:{name}"

    def charge(self, label: str, **kw: Any) -> Any:
        """Charge ``link:<from>:<label>`` on the run's ledger (which enforces the total)."""
        return self.ledger.charge(f"{self.prefix}:{label}", **kw)

    def __getattr__(self, name: str) -> Any:
        """Anything else (``spent_rho``, ``charges``, …) from the run's ledger."""
        if name in ("ledger", "prefix"):
            raise AttributeError(name)
        return getattr(self.ledger, name)


@dataclass
class GraphResult:
    """Synthetic tables (key, codes, FK columns) and per-link reports."""

    tables: dict[str, pd.DataFrame]
    links: list[dict[str, Any]]
    public: list[str]
    pairs: dict[str, np.ndarray] = field(default_factory=dict)  # link tables: name -> (m, 2) synthetic id pairs


class GraphCheckpoint:
    """The schema graph's state in the run's checkpoint: committed after each synthetic table (round s) and
    after each link (the next round) with the ledger's charges; public tables are not stored."""

    def __init__(self, checkpoint: Any, ledger: Any) -> None:
        """State saved through ``checkpoint`` (None: no checkpoint) with ``ledger``'s charges."""
        self.checkpoint, self.ledger = checkpoint, ledger
        self.syn: dict[str, np.ndarray] = {}
        self.fks: dict[str, np.ndarray] = {}
        self.reports: list[dict[str, Any]] = []

    def restore(self, resume: bool) -> None:
        """With ``resume``: the committed tables, links, reports and the ledger's charges (replayed once)."""
        from privcube.core.errors import CheckpointError
        from privcube.relational.stages.composition import restore_ledger

        loaded = self.checkpoint.load() if resume and self.checkpoint is not None else None
        if loaded is None:
            return
        meta, arrays = loaded[1]["meta"], loaded[1]["arrays"]
        if meta.get("stage") != "graph":
            raise CheckpointError("relational checkpoint: not the checkpoint of a schema-graph run")
        restore_ledger(self.ledger, meta.get("ledger"))
        self.syn = {n: np.asarray(arrays[f"syn.{n}"], dtype=np.int64) for n in meta["tables_done"]}
        self.fks = {n: np.asarray(arrays[f"fk.{n}"], dtype=np.int64) for n in meta["links_done"]}
        self.reports = list(meta["reports"])

    def save(self) -> None:
        """Commit the state reached so far (nothing without a checkpoint)."""
        if self.checkpoint is None:
            return
        meta = {"stage": "graph", "tables_done": sorted(self.syn), "links_done": list(self.fks),
                "reports": self.reports, "ledger": self.ledger.to_dict()}
        arrays = {**{f"syn.{n}": c for n, c in self.syn.items()}, **{f"fk.{n}": v for n, v in self.fks.items()}}
        self.checkpoint.save(len(self.syn) + len(self.fks) - 1, {"meta": meta, "arrays": arrays})


def synthesize_graph_tables(job: RelationalJob, frames: dict[str, tuple[pd.DataFrame, Any]], ledger: Any,
                            noise: Any, ctx: Any, state: GraphCheckpoint) -> dict[str, np.ndarray]:
    """Stage 1: synthetic codes of every table (its own budget; committed after each), public tables as given."""
    from privcube.relational.stages.resolved_links import table_codes
    from privcube.relational.stages.parameters import check_params
    from privcube.relational.stages.real_side import public_codes, table_oracle
    from privcube.relational.stages.table_synthesis import synth_table

    p = check_params(job.params)
    rows = dict(p["synthetic_rows"] or {})
    out: dict[str, np.ndarray] = {}
    oracles: dict[str, tuple[Any, int]] = {}
    sizes: dict[str, int] = {}
    for name, (frame, dom) in frames.items():  # the public row counts first: a job that cannot fit stops here
        if name in job.public:  # released as given, in an order that says nothing about the input's
            out[name] = unlinkable_order(public_codes(frame, dom, name, ctx), noise, name)
            sizes[name] = len(out[name])
        elif name in state.syn:
            sizes[name] = len(state.syn[name])
        else:
            oracles[name] = table_oracle(frame, dom, name, ctx)
            sizes[name] = int(rows.get(name, oracles[name][1]))
    check_graph_room(job, p, sizes)
    for name, (frame, dom) in frames.items():
        if name in job.public:
            continue
        if name not in state.syn:
            oracle, n_real = oracles.pop(name)
            state.syn[name] = synth_table(name, oracle, n_real, dom, sizes[name], job.parts[name],
                                          ledger, noise, p, ctx)
            state.save()
            if ctx.progress is not None:
                ctx.progress(f"synthesize table {name}", 1.0)
        out[name] = table_codes(state.syn[name], dom, f"synthetic {name}")
    return out


def unlinkable_order(codes: np.ndarray, noise: Any, name: str) -> np.ndarray:
    """A public table's rows (its real codes, released as they are) in an order that tells nothing about which
    input row a synthetic one is: sorted by their codes, so the result depends only on the multiset of rows and
    not on the input's order, then permuted by the run's noise source (its own stream). Keys are then given in
    this order (0..n-1), so a synthetic child's foreign key points at a row known only by its codes: rows with
    equal codes are interchangeable, and none is tied to a real key or file position."""
    codes = np.asarray(codes)
    order = np.lexsort(codes.T[::-1]) if codes.ndim == 2 and codes.shape[1] else np.arange(len(codes))
    return codes[order][noise.generator("relational", "public-order", name).permutation(len(codes))]


def check_graph_room(job: RelationalJob, p: Mapping[str, Any], sizes: Mapping[str, int]) -> None:
    """Before any table is synthesized (nothing spent): every foreign key's synthetic children must fit on its
    synthetic parents at ≤ its d_max each (the link's own, else the job's; ``degrees: preserve``); public row
    counts only. Link tables are checked
    when their link count is read."""
    from privcube.relational.stages.problem import room_error

    if p["degrees"] != "preserve":
        return
    for f in job.fks:
        if f.kind == "one_to_many":
            d_max = int(job.link_params(link_name(f)).get("d_max", p["d_max"]))
            msg = room_error(f.kind, (f.left, f.right), sizes[f.left], sizes[f.right], sizes[f.left], d_max)
            if msg:
                raise ConfigError(msg)


def run_graph(job: RelationalJob, inputs: Any, ledger: Any, noise: Any, ctx: Any) -> GraphResult:
    """Both stages for every table and link (see the module docstring)."""
    from privcube.relational.stages.composition import PrefixNoise
    from privcube.relational.stages.run import run_relational
    from privcube.relational.stages.parameters import check_params

    frames, per_link = inputs
    state = GraphCheckpoint(ctx.checkpoint, ledger)
    state.restore(bool(ctx.resume))
    syn = synthesize_graph_tables(job, frames, ledger, noise, ctx, state)
    for f, spec in per_link:
        name = link_name(f)
        if name in state.fks:
            continue
        sib = sibling_of(job, f, per_link, state, len(syn[f.right]), ctx)
        # within a sibling: this link is learned on that link's synthetic parents only (conditioned on it)
        among = np.flatnonzero(sib.anchor_has) if sib is not None and sib.within else None
        if among is not None and len(syn[f.left]) > among.size * int(check_params(job.link_params(name))["d_max"]):
            among = None  # too few of them to hold the children under d_max: learned on all, then moved in
        parents = syn[f.right] if among is None else syn[f.right][among]
        res = run_relational(spec["tables"], spec["links"], job.link_params(name), {"tables": {}, "links": job.parts[name]},
                             LinkLedger(ledger, name), PrefixNoise(noise, ("relational", "link", name)),
                             synthetic_tables={f.left: syn[f.left], f.right: parents}, progress=ctx.progress,
                             context=ctx, sibling=sib)
        rep = dict(res.report)
        rep.pop("ledger_rho_spent", None)  # the run's total; the link's own spend is in the ledger's parts
        state.fks[name] = link_state(f, res) if among is None else among[link_state(f, res)]
        ends = {"from": name, "to": f"{f.right}.{f.right_col}"} if f.kind == "one_to_many" else \
            {"from": name, "left": f"{f.left}.{f.left_col}", "right": f"{f.right}.{f.right_col}"}
        state.reports.append({**ends, "name": name, "kind": f.kind, "budget": job.parts[name].to_dict(),
                              "dp_cross_error": rep.get("dp_cross_error"), "mechanism_report": rep})
        state.save()
    tables = {}
    for name, (_, dom) in frames.items():
        t = pd.DataFrame(syn[name], columns=list(dom.attributes))
        t.insert(0, job.keys[name], np.arange(len(t), dtype=np.int64))
        for f in job.fks:
            if f.left == name and f.kind == "one_to_many":
                t[f.left_col] = state.fks[link_name(f)]
        tables[name] = t
    order = [link_name(f) for f in job.fks]
    reports = sorted(state.reports, key=lambda r: order.index(r["from"]))
    pairs = {link_name(f): state.fks[link_name(f)] for f in job.fks if f.kind == "many_to_many"}
    return GraphResult(tables, reports, list(job.public), pairs)


def sibling_of(job: RelationalJob, f: Any, per_link: list, state: GraphCheckpoint, n_parents: int,
               ctx: Any) -> Any:
    """A foreign key's earlier sibling (``siblings.Sibling``), when another foreign key into the same parent table
    ran before it: the one it is declared ``within``, else the first. Its synthetic parents' flags come from that
    link's synthetic foreign keys; for a release (no ``within``; ``sibling_share`` not 0) also its real parents'
    flags, as a task where the links are. None: no sibling, or siblings kept independent."""
    from privcube.relational.stages.parameters import check_params
    from privcube.relational.stages.real_side import parent_flags_of
    from privcube.relational.stages.siblings import Sibling

    if f.kind != "one_to_many":
        return None
    earlier = [g for g in job.fks[:job.fks.index(f)] if g.kind == "one_to_many" and g.right == f.right]
    if not earlier:
        return None
    p = check_params(job.link_params(link_name(f)))
    if p["degrees"] != "preserve" or (not f.within and p["sibling_share"] == 0):
        return None
    anchor = next(g for g in earlier if link_name(g) == f.within) if f.within else earlier[0]
    aname = link_name(anchor)
    pa = check_params(job.link_params(aname))
    has = np.bincount(state.fks[aname], minlength=n_parents)[:n_parents] > 0
    flags = None
    if not f.within:
        spec = next(sp for g, sp in per_link if g is anchor)
        flags = parent_flags_of(spec["tables"], spec["links"], pa, ctx)
    return Sibling(aname, has, int(pa["d_max"]), bool(f.within), flags)


def link_state(f: Any, res: Any) -> np.ndarray:
    """What a finished link keeps: a foreign key's column of synthetic parent ids (one per child), a link
    table's (left id, right id) pairs as an (m, 2) array. Ids are row positions of the synthetic tables."""
    if f.kind == "one_to_many":
        return res.tables[f.left][f.left_col].to_numpy().astype(np.int64)
    return res.links.iloc[:, :2].to_numpy().astype(np.int64).reshape(-1, 2)


__all__ = ["GraphCheckpoint", "GraphResult", "LinkLedger", "check_graph_room", "link_state", "run_graph",
           "sibling_of", "synthesize_graph_tables", "unlinkable_order"]
