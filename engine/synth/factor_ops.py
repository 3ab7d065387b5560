"""Sums and scalings of clique tables (factors) over their attributes: the inner loop of model fitting.

A clique table has one axis per attribute (ascending attribute indices). Projecting it on a subset and
multiplying it by a subset table are done with neighbouring axes merged (a 14-attribute table seen
from a pair is at most 5-D), sums as matrix–vector products with a ones vector (BLAS, instead of numpy's
strided reductions over many short axes), and scalings whose innermost merged axis is short as one
gather of the factor through a precomputed cell index. Same values as ``arr.sum(axis=...)`` and
broadcasting, up to floating-point rounding.
"""
from __future__ import annotations

import functools
import math
from collections.abc import MutableMapping

import numpy as np

Idx = tuple[int, ...]

GATHER_MAX_CELLS = 1 << 17  # tables up to this size keep a cell -> factor-cell index per subset
GATHER_MAX_INNER = 16  # ... used when the innermost merged axis is shorter than this


@functools.lru_cache(maxsize=4096)
def merged_runs(shape: tuple[int, ...], attrs: Idx, sub: Idx) -> tuple[tuple[int, ...], tuple[bool, ...],
                                                                       tuple[int, ...]]:
    """The table seen with neighbouring axes merged when both are in ``sub`` or both out of it:
    (merged shape, whether each merged axis is in ``sub``, the ``sub`` table's shape)."""
    merged: list[int] = []
    inside: list[bool] = []
    for n, a in zip(shape, attrs):
        flag = a in sub
        if merged and inside[-1] == flag:
            merged[-1] *= n
        else:
            merged.append(n)
            inside.append(flag)
    return tuple(merged), tuple(inside), tuple(n for n, a in zip(shape, attrs) if a in sub)


@functools.lru_cache(maxsize=4096)
def projection_plan(shape: tuple[int, ...], attrs: Idx, sub: Idx) -> tuple[tuple[tuple[int, int, int], ...],
                                                                           tuple[int, ...]]:
    """How to sum an ``attrs`` table down to ``sub``: (before, run, after) reshapes, each summed over its
    middle axis by a ones vector (trailing run first, then leading, then the inner ones), and the result's
    shape."""
    merged, inside, sub_shape = merged_runs(shape, attrs, sub)
    m, ins = list(merged), list(inside)
    steps: list[tuple[int, int, int]] = []
    if not ins[-1]:  # trailing run: contiguous rows times ones
        steps.append((math.prod(m[:-1]), m[-1], 1))
        m, ins = m[:-1], ins[:-1]
    if m and not ins[0]:  # leading run: ones times a (run, rest) matrix
        steps.append((1, m[0], math.prod(m[1:])))
        m, ins = m[1:], ins[1:]
    k = 1
    while k < len(m):  # inner runs: (before, run, after) stacks; ``before`` is a product of kept axes
        if not ins[k]:
            steps.append((math.prod(m[:k]), m[k], math.prod(m[k + 1:])))
            del m[k], ins[k]
        k += 1
    return tuple(steps), sub_shape


def project_idx(arr: np.ndarray, attrs: Idx, sub: Idx) -> np.ndarray:
    """Sum a table over ``attrs`` (ascending indices) down to ``sub`` (ascending, a subset)."""
    if len(sub) == len(attrs):
        return arr
    steps, sub_shape = projection_plan(arr.shape, tuple(attrs), tuple(sub))
    x = np.ascontiguousarray(arr, dtype=float)
    for before, run, after in steps:
        if after == 1:
            x = x.reshape(before, run) @ np.ones(run)
        elif before == 1:
            x = np.ones(run) @ x.reshape(run, after)
        else:
            x = np.matmul(np.ones(run), x.reshape(before, run, after))
    return x.reshape(sub_shape)


def scale_idx(arr: np.ndarray, factor: np.ndarray, sub: Idx, attrs: Idx,
              cache: MutableMapping[tuple, np.ndarray] | None = None) -> np.ndarray:
    """``arr * factor`` with the ``sub`` table ``factor`` broadcast along the other axes of ``attrs``, in
    place when ``arr`` is contiguous (returned either way). ``cache`` keeps the gather indices of small
    tables between calls (one fit's worth; not kept globally)."""
    arr = np.ascontiguousarray(arr, dtype=float)
    merged, inside, _ = merged_runs(arr.shape, tuple(attrs), tuple(sub))
    f = np.ascontiguousarray(factor, dtype=float).reshape(-1)
    if cache is not None and arr.size <= GATHER_MAX_CELLS and merged[-1] < GATHER_MAX_INNER and len(merged) > 1:
        key = (arr.shape, tuple(attrs), tuple(sub))
        index = cache.get(key)
        if index is None:
            index = cache[key] = cell_index(arr.shape, attrs, sub)
        flat = arr.reshape(-1)
        np.multiply(flat, np.take(f, index), out=flat)
        return arr
    view = arr.reshape(merged)
    np.multiply(view, f.reshape(tuple(m if i else 1 for m, i in zip(merged, inside))), out=view)
    return arr


def cell_index(shape: tuple[int, ...], attrs: Idx, sub: Idx) -> np.ndarray:
    """For every cell of an ``attrs`` table (C order), the flat index of its cell in the ``sub`` table."""
    index = np.zeros(1, dtype=np.intp)
    for n, a in zip(shape, attrs):
        if a in sub:
            index = (index[:, None] * n + np.arange(n, dtype=np.intp)[None, :]).reshape(-1)
        else:
            index = np.repeat(index, n)
    return index


def expand_idx(arr: np.ndarray, sub: Idx, attrs: Idx) -> np.ndarray:
    """Reshape a ``sub`` table so it broadcasts against an ``attrs`` table (both ascending)."""
    shape = [arr.shape[sub.index(a)] if a in sub else 1 for a in attrs]
    return arr.reshape(shape)


__all__ = ["project_idx", "scale_idx", "expand_idx", "cell_index", "merged_runs", "projection_plan"]
