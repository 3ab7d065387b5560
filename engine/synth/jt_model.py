"""A junction-tree graphical model fitted to published marginals, and forward sampling from it.

The model keeps one calibrated probability table (belief) per junction-tree clique. Fitting is
iterative proportional fitting (the maximum-entropy distribution with the given marginals) done on
the tree: a sweep walks the tree depth first, rescales each clique's belief to its assigned target
marginals, and passes the separator marginal along every step it takes, so the clique it stands on
always holds the exact marginal of the current joint (exact belief propagation, one message per step).
On consistent marginals of a decomposable model one sweep is exact. Sampling draws the root clique,
then each clique's new attributes given its separator with its parent (forward sampling).
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from privcube.core.domain import Domain
from privcube.synth.factor_ops import expand_idx, project_idx, scale_idx
from privcube.synth.junction_tree import JunctionTree

Idx = tuple[int, ...]


def _ratio(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """target / current with 0 where current is 0 (the model already puts no mass there)."""
    return np.divide(target, current, out=np.zeros_like(current), where=current > 0)


@dataclass
class _Conditional:
    """P(new attributes | separator) of a non-root clique, as row-offset cumulative tables."""

    clique: int
    sep: Idx
    new: Idx
    sep_shape: tuple[int, ...]
    new_shape: tuple[int, ...]
    cdf: np.ndarray  # flat: row r holds r + cumulative probabilities of its new-attribute cells


@dataclass
class JunctionTreeModel:
    """Calibrated clique beliefs over a junction tree; ``sample`` draws records (domain column order)."""

    domain: Domain
    tree: JunctionTree
    beliefs: list[np.ndarray]
    sweeps: int = 0
    residual: float = 0.0
    roots: list[int] = field(default_factory=list)
    plan: list[_Conditional] = field(default_factory=list)
    root_cdf: dict[int, np.ndarray] = field(default_factory=dict)
    gather: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)  # cell indices, during fit only

    # ---- fitting -------------------------------------------------------------------------------------
    @classmethod
    def fit(cls, targets: Mapping[Idx, np.ndarray], domain: Domain, tree: JunctionTree, *, max_sweeps: int = 200,
            tol: float = 1e-9) -> JunctionTreeModel:
        """Max-entropy fit of the tree's beliefs to ``targets`` (ascending index tuple -> probability table,
        each inside some clique of ``tree``), by IPF with message passing; stops when no target moves by
        more than ``tol`` in L1 within a sweep, or when 10 sweeps in a row gain less than 0.1 %."""
        shape = domain.shape
        beliefs = [np.full([shape[a] for a in c], 1.0 / np.prod([shape[a] for a in c], dtype=float))
                   for c in tree.cliques]
        assigned: dict[int, list[Idx]] = {i: [] for i in range(len(tree.cliques))}
        for t in targets:
            holders = [i for i, c in enumerate(tree.cliques) if set(t) <= set(c)]
            assigned[min(holders, key=lambda i: beliefs[i].size)].append(t)
        for ts in assigned.values():
            ts.sort(key=len, reverse=True)  # lower-order targets last: they hold at the end of a sweep
        model = cls(domain, tree, beliefs, roots=_roots(tree))
        walk = model._euler_walk()
        best, since = np.inf, 0
        for sweep in range(max(1, max_sweeps)):
            worst = model._sweep(walk, targets, assigned)
            model.sweeps, model.residual = sweep + 1, worst
            best, since = (worst, 0) if worst < best * (1 - 1e-3) else (best, since + 1)
            if worst <= tol or since >= 10:  # converged, or stalled (targets that no model can match exactly)
                break
        model._calibrate()
        model.gather.clear()  # not shipped with the model to the workers that sample
        model._prepare_sampling()
        return model

    @classmethod
    def from_beliefs(cls, domain: Domain, tree: JunctionTree, beliefs: Sequence[np.ndarray]) -> JunctionTreeModel:
        """A model ready to sample from calibrated clique marginals (e.g. the post-processing model's)."""
        model = cls(domain, tree, [np.asarray(b, dtype=float) for b in beliefs], roots=_roots(tree))
        model._prepare_sampling()
        return model

    def _euler_walk(self) -> list[tuple[int, int | None]]:
        """(clique, previous clique) steps of a depth-first walk of every component, back to its root."""
        adj = self.tree.neighbours()
        steps: list[tuple[int, int | None]] = []
        for r in self.roots:
            steps.append((r, None))
            stack = [(r, iter(sorted(adj[r])), None)]
            while stack:
                u, it, par = stack[-1]
                nxt = next((v for v in it if v != par), None)
                if nxt is None:
                    stack.pop()
                    if stack:
                        steps.append((stack[-1][0], u))
                    continue
                steps.append((nxt, u))
                stack.append((nxt, iter(sorted(adj[nxt])), u))
        return steps

    def _message(self, frm: int, to: int) -> None:
        """Make clique ``to`` agree with ``frm`` on their separator (keeps ``to``'s conditional)."""
        a, b = self.tree.cliques[frm], self.tree.cliques[to]
        sep = tuple(x for x in b if x in a)
        if not sep:
            return
        want = project_idx(self.beliefs[frm], a, sep)
        have = project_idx(self.beliefs[to], b, sep)
        self.beliefs[to] = scale_idx(self.beliefs[to], _ratio(want, have), sep, b, self.gather)

    def _sweep(self, walk: list[tuple[int, int | None]], targets: Mapping[Idx, np.ndarray],
               assigned: Mapping[int, list[Idx]]) -> float:
        """One IPF sweep; returns the largest L1 gap met between a target and the model before its update."""
        worst, done = 0.0, set()
        for u, prev in walk:
            if prev is not None:
                self._message(prev, u)
            if u in done or not assigned[u]:
                continue
            done.add(u)
            c = self.tree.cliques[u]
            for t in assigned[u]:
                cur = project_idx(self.beliefs[u], c, t)
                worst = max(worst, float(np.abs(cur - targets[t]).sum()))
                self.beliefs[u] = scale_idx(self.beliefs[u], _ratio(targets[t], cur), t, c, self.gather)
        return worst

    def _calibrate(self) -> None:
        """Pass messages outward from each root so every belief is the exact marginal of the joint."""
        adj = self.tree.neighbours()
        for r in self.roots:
            queue, seen = [r], {r}
            while queue:
                u = queue.pop(0)
                for v in sorted(adj[u]):
                    if v not in seen:
                        self._message(u, v)
                        seen.add(v)
                        queue.append(v)

    # ---- queries -------------------------------------------------------------------------------------
    def marginal(self, attrs: tuple[str, ...]) -> np.ndarray:
        """The model's probability table on ``attrs`` (axes in the order given); must lie in one clique."""
        idx = tuple(self.domain.index(a) for a in attrs)
        srt = tuple(sorted(idx))
        for c, b in zip(self.tree.cliques, self.beliefs):
            if set(srt) <= set(c):
                p = project_idx(b, c, srt)
                return np.transpose(p, [srt.index(i) for i in idx]) if len(idx) > 1 else p
        raise ValueError(f"{list(attrs)} is not inside one clique of the junction tree")

    # ---- sampling ------------------------------------------------------------------------------------
    def _prepare_sampling(self) -> None:
        """Cumulative tables for forward sampling, computed once (chunks on workers reuse them)."""
        adj = self.tree.neighbours()
        for r in self.roots:
            p = self.beliefs[r].ravel()
            self.root_cdf[r] = np.cumsum(p / p.sum()) if p.sum() > 0 else np.linspace(1 / p.size, 1, p.size)
            queue, seen = [r], {r}
            while queue:
                u = queue.pop(0)
                for v in sorted(adj[u]):
                    if v in seen:
                        continue
                    seen.add(v)
                    queue.append(v)
                    self.plan.append(self._conditional(u, v))

    def _conditional(self, parent: int, child: int) -> _Conditional:
        c, pc = self.tree.cliques[child], self.tree.cliques[parent]
        sep = tuple(x for x in c if x in pc)
        new = tuple(x for x in c if x not in pc)
        b = np.transpose(self.beliefs[child], [c.index(x) for x in sep + new])
        sshape, nshape = b.shape[:len(sep)], b.shape[len(sep):]
        rows = b.reshape(int(np.prod(sshape, dtype=np.int64)), -1)
        tot = rows.sum(axis=1, keepdims=True)
        fallback = rows.sum(axis=0) if rows.sum() > 0 else np.ones(rows.shape[1])
        probs = np.where(tot > 0, rows / np.where(tot > 0, tot, 1.0), fallback / fallback.sum())
        cdf = np.cumsum(probs, axis=1)
        cdf /= cdf[:, -1:]
        cdf += np.arange(cdf.shape[0], dtype=float)[:, None]
        return _Conditional(child, sep, new, tuple(sshape), tuple(nshape), cdf.ravel())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records (n × d codes, domain column order): roots, then each clique given its separator.

        Controlled rounding instead of independent draws. Stratified (systematic) draws: within every
        separator value the m records take the uniforms (j + U)/m, j = 0..m−1, so every cell of a clique
        given its separator value is within one record of its expected count (a root clique's cells
        within one of n·p). Balanced: the slots j go to the group's records sorted by the attributes
        drawn before (in a random order) through a golden-ratio sequence, so the records of any one
        earlier value get an evenly spread share of the slots: the new attributes are drawn near the
        model's conditional proportions for every earlier value too, not only on average (the noise of
        random pairing is removed as far as one ordering allows). The roots of further components (no
        separator) are balanced the same way against the components drawn before them."""
        d = len(self.domain)
        out = np.zeros((n, d), dtype=np.int64)
        if n == 0:
            return out
        drawn: list[int] = []
        for r in self.roots:
            c = self.tree.cliques[r]
            cdf = self.root_cdf[r]
            zero = np.zeros(n, dtype=np.int64)
            pos = (balanced_search(cdf / cdf[-1], zero, self._key(out, drawn, rng), rng) if drawn else
                   stratified_search(cdf / cdf[-1], zero, rng))  # a further component: balanced as well
            cell = np.minimum(pos, cdf.size - 1)
            for a, codes in zip(c, np.unravel_index(cell, [self.domain.shape[a] for a in c])):
                out[:, a] = codes
            drawn.extend(c)
        for cond in self.plan:
            width = int(np.prod(cond.new_shape, dtype=np.int64))
            row = (np.ravel_multi_index(tuple(out[:, a] for a in cond.sep), cond.sep_shape)
                   if cond.sep else np.zeros(n, dtype=np.int64))
            pos = balanced_search(cond.cdf, row, self._key(out, [a for a in drawn if a not in cond.sep], rng), rng)
            cell = np.clip(pos - row * width, 0, width - 1)
            for a, codes in zip(cond.new, np.unravel_index(cell, cond.new_shape)):
                out[:, a] = codes
            drawn.extend(cond.new)
        return out

    def _key(self, out: np.ndarray, attrs: list[int], rng: np.random.Generator) -> np.ndarray:
        """One integer per record: its codes of ``attrs`` in a random order, as many as fit 62 bits."""
        key = np.zeros(out.shape[0], dtype=np.int64)
        room = 1
        for i in rng.permutation(len(attrs)):
            size = int(self.domain.shape[attrs[i]])
            if room * size >= 1 << 62:
                break
            key = key * size + out[:, attrs[i]]
            room *= size
        return key


#: the golden-ratio fraction: j·φ mod 1 spreads any run of consecutive j evenly over [0, 1)
_PHI = (5.0 ** 0.5 - 1.0) / 2.0


def balanced_search(cdf: np.ndarray, groups: np.ndarray, key: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """searchsorted(cdf, group + u, 'right') per record, u the group's systematic uniforms (rank + U)/m, the
    ranks dealt to the group's records sorted by ``key`` (random among equal keys) in the order of the
    golden-ratio sequence frac(j·φ + V): each group's cells stay within one of m·p, and the records of
    one key value (a run of consecutive j) get ranks spread evenly over [0, m)."""
    n = groups.size
    order = _group_key_order(groups, key, rng)
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    counts = np.diff(np.r_[starts, n])
    first = np.repeat(starts, counts)
    spread = np.mod((np.arange(n) - first) * _PHI + np.repeat(rng.random(starts.size), counts), 1.0)
    # slots in golden-ratio order within each group (groups 2 apart, so no spread < 1 crosses into the next)
    by_spread = np.argsort(2.0 * np.repeat(np.arange(starts.size, dtype=float), counts) + spread)
    rank = np.empty(n, dtype=np.int64)
    rank[by_spread] = np.arange(n) - first
    u = (rank + np.repeat(rng.random(starts.size), counts)) / np.repeat(counts, counts)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.searchsorted(cdf, g + np.minimum(u, np.nextafter(1.0, 0.0)), side="right")
    return out


def _group_key_order(groups: np.ndarray, key: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Records sorted by group, then key, then at random: one integer sort when (group, key) and random low
    bits fit 62 bits, else a lexicographic sort."""
    n = groups.size
    span = (int(groups.max()) + 1) * (int(key.max()) + 1) if n else 1
    bits = 62 - span.bit_length()
    if bits >= 16:
        comp = ((groups * (int(key.max()) + 1) + key) << bits) | rng.integers(0, 1 << bits, n, dtype=np.int64)
        return np.argsort(comp)
    return np.lexsort((rng.random(n), key, groups))


def stratified_search(cdf: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """searchsorted(cdf, group + stratified uniform, 'right') per record, with the queries in sorted order
    (they are sorted within and across groups by construction: cache-friendly on large tables)."""
    order, u_sorted = _stratified_sorted(groups, rng)
    out = np.empty(groups.size, dtype=np.int64)
    out[order] = np.searchsorted(cdf, groups[order] + u_sorted, side="right")
    return out


def stratified_uniforms(groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniform per record in [0, 1): within each group value, (rank + U)/m with ranks a random
    permutation of the group's m records and one U per group (systematic sampling)."""
    order, u_sorted = _stratified_sorted(groups, rng)
    u = np.empty(groups.size)
    u[order] = u_sorted
    return u


def _stratified_sorted(groups: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(records sorted by group in random order within, their stratified uniforms in that order)."""
    n = groups.size
    order = np.argsort(groups + rng.random(n))  # by group, random within (group ids are small integers)
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    counts = np.diff(np.r_[starts, n])
    first = np.repeat(starts, counts)
    rank = np.arange(n) - first
    offset = np.repeat(rng.random(starts.size), counts)
    return order, np.minimum((rank + offset) / np.repeat(counts, counts), np.nextafter(1.0, 0.0))


def _roots(tree: JunctionTree) -> list[int]:
    """The lowest-numbered clique of each connected component of the tree."""
    adj = tree.neighbours()
    seen: set[int] = set()
    roots = []
    for r in range(len(tree.cliques)):
        if r in seen:
            continue
        roots.append(r)
        stack = [r]
        while stack:
            u = stack.pop()
            if u not in seen:
                seen.add(u)
                stack.extend(adj[u])
    return roots


def usable_subsets(clique: Idx, cliques: list[tuple[int, ...]]) -> list[Idx]:
    """The largest subsets of ``clique`` that lie inside one junction-tree clique (maximal ones only)."""
    inside = [s for k in range(len(clique), 0, -1) for s in itertools.combinations(clique, k)
              if any(set(s) <= set(c) for c in cliques)]
    out: list[Idx] = []
    for s in inside:
        if not any(set(s) <= set(o) for o in out):
            out.append(s)
    return out


__all__ = ["JunctionTreeModel", "project_idx", "scale_idx", "expand_idx", "usable_subsets", "stratified_uniforms",
           "balanced_search"]
