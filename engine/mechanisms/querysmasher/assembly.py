"""Global assembly (QuerySmasher Alg. 1, lines 14-17), error accounting and reconstruction.

Given each subworkload's cost-1 error L_𝒜', the noise scales σ²_𝒜' = (Σ √L) / (β √L_𝒜') minimise
the total weighted error subject to Σ 1/σ² = β; the total weighted SSE is (Σ √L)² / β.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.kron import kron_matvec
from privcube.mechanisms.querysmasher.decomposition import (
    Part,
    Subworkload,
    block_gram,
    dense_kron,
    group_terms,
    projected,
    term_rows,
)
from privcube.mechanisms.querysmasher.solution import PartSolution
from privcube.core.workload import QueryGroup

Clique = tuple[str, ...]


@dataclass
class SubSolution:
    """Strategy for one subworkload: the Kronecker parts' solutions, its cost-1 error and noise scale."""

    sub: Subworkload
    parts: list[PartSolution]
    L: float
    sigma2: float = float("inf")
    dual: float = float("nan")
    info: dict[str, Any] = field(default_factory=dict)


def assemble(subs: Mapping[Clique, Subworkload], solved: Mapping[Any, PartSolution], beta: float) -> dict[Clique, SubSolution]:
    """Combine part solutions into per-subworkload errors and the optimal budget split at cost β."""
    out: dict[Clique, SubSolution] = {}
    for key, s in subs.items():
        parts = [solved[p.key] for p in s.parts]
        lval = s.alpha * math.prod(p.L for p in parts)
        dual = s.alpha * math.prod(p.dual if math.isfinite(p.dual) else 0.0 for p in parts) if parts else lval
        if lval > 0:
            out[key] = SubSolution(s, parts, lval, dual=dual)
    root = sum(math.sqrt(x.L) for x in out.values())
    for x in out.values():
        x.sigma2 = root / (beta * math.sqrt(x.L))
    return out


def privacy_cost(sols: Mapping[Clique, SubSolution]) -> float:
    """Σ 1/σ² (an upper bound on the composed privacy cost β, Eq. 5)."""
    return float(sum(1.0 / x.sigma2 for x in sols.values()))


def _trace_term(sol: SubSolution, blocks: tuple, domain: Domain) -> float:
    """tr(term Gram · V⁺) for one group term (unit α) against a subworkload's Kronecker strategy."""
    by_attrs = {b.attrs: b for b in blocks}
    val = 1.0
    for part, ps in zip(sol.sub.parts, sol.parts):
        if not part.terms:  # shared block: exactly one block of the term
            key = by_attrs[part.attrs].key
            if ps.vpinv is None or part.size > 4096:  # factored strategy / big part: no c × c Gram
                val *= ps.trace_rows(projected(*key))
            else:
                val *= float(np.sum(block_gram(key) * ps.vpinv))
        else:
            pos = {a: i for i, a in enumerate(part.attrs)}
            mine = tuple((tuple(pos[a] for a in b.attrs), b.key) for b in blocks if b.attrs[0] in pos)
            if ps.vpinv is None or part.size > 4096:
                val *= ps.trace_rows(term_rows(mine, part.shape))
            else:
                val *= float(np.sum(dense_kron(mine, part.shape) * ps.vpinv))
    return val


def group_sse(group: QueryGroup, sols: Mapping[Clique, SubSolution], domain: Domain) -> float:
    """Expected total squared error Σ_q Var(q) over the group's queries (unweighted)."""
    total = 0.0
    for sub, term in group_terms(domain, group):
        sol = sols.get(sub)
        if sol is None:
            continue
        total += sol.sigma2 * term.alpha / group.weight * _trace_term(sol, term.blocks, domain)
    return total


def query_variances(group: QueryGroup, sols: Mapping[Clique, SubSolution], domain: Domain) -> np.ndarray:
    """Exact variance of every query of the group (Kronecker row order)."""
    rows = [f.matrix(domain).shape[0] for f in group.factors]
    out = np.zeros(rows)
    for sub, term in group_terms(domain, group):
        sol = sols.get(sub)
        if sol is None:
            continue
        t = np.full(rows, 1.0)
        for i, f in enumerate(group.factors):
            if not any(a in sub for a in f.attributes):
                p = projected(f.query, domain.shape_of(f.attributes), (False,) * len(f.attributes))
                t = t * _axis(p[:, 0] ** 2, [i], rows)
        for part, ps in zip(sol.sub.parts, sol.parts):
            idx = [i for i, f in enumerate(group.factors) if any(a in part.attrs for a in f.attributes)]
            mats = [projected(*next(b.key for b in term.blocks if b.attrs[0] in group.factors[i].attributes))
                    for i in idx]
            q = mats[0]
            for m in mats[1:]:
                q = np.kron(q, m)
            d = ps.quad(q)
            t = t * _axis(d, idx, rows)
        out += sol.sigma2 * t
    return out.reshape(-1)


def _axis(v: np.ndarray, idx: list[int], rows: list[int]) -> np.ndarray:
    shape = [rows[i] if i in idx else 1 for i in range(len(rows))]
    return np.asarray(v).reshape(shape)


def measure(sols: Mapping[Clique, SubSolution], exact: Mapping[Clique, np.ndarray],
            gaussian: Callable[[Clique, tuple[int, ...], float], np.ndarray]) -> dict[Clique, np.ndarray]:
    """ω = B x + N(0, σ² I) per subworkload, returned as r̂ = B⁺ ω over the subset's cells (centred)."""
    out: dict[Clique, np.ndarray] = {}
    for key, sol in sols.items():
        x = np.asarray(exact[key], dtype=float)
        shape = x.shape
        if not key:
            out[key] = np.asarray(x + gaussian(key, (), math.sqrt(sol.sigma2)), dtype=float)
            continue
        order = [a for p in sol.sub.parts for a in p.attrs]
        perm = [key.index(a) for a in order]
        xt = np.transpose(x, perm).reshape(-1)
        bs = [p.b for p in sol.parts]
        bx = kron_matvec(bs, xt)  # factored parts have fewer rows than cells
        omega = bx + gaussian(key, bx.shape, math.sqrt(sol.sigma2))
        r = kron_matvec([p.b_pinv() for p in sol.parts], omega)
        r = np.transpose(r.reshape([shape[i] for i in perm]), np.argsort(perm))
        for ax in range(r.ndim):
            r = r - r.mean(axis=ax, keepdims=True)
        out[key] = r
    return out


def marginal_estimate(attrs: Clique, residuals: Mapping[Clique, np.ndarray], domain: Domain) -> np.ndarray:
    """x̂_𝒜 = Σ_{𝒜'⊆𝒜} smear(r̂_𝒜'): the estimate every workload query on 𝒜 is read from."""
    shape = domain.shape_of(attrs)
    out = np.zeros(shape)
    for key, r in residuals.items():
        if not all(a in attrs for a in key):
            continue
        idx = tuple(slice(None) if a in key else None for a in attrs)
        denom = math.prod(domain[a] for a in attrs if a not in key)
        out = out + np.asarray(r)[idx] / denom
    return out


def answer_group(group: QueryGroup, residuals: Mapping[Clique, np.ndarray], domain: Domain) -> np.ndarray:
    """Answers to every query of the group from the measured residual estimates."""
    x = marginal_estimate(group.attributes, residuals, domain).reshape(-1)
    if not group.factors:
        return x
    return kron_matvec([f.matrix(domain) for f in group.factors], x)


def part_cost(part: Part) -> float:
    """Rough solve cost of a part (for scheduling the largest first)."""
    return float(part.size) ** 3
