"""Census releases over a geography tree: the estimation core, pure numpy (no dask, no I/O).

- :mod:`.hierarchy` — the geography tree from the public map (children contiguous: segment sums);
- :mod:`.gls` — exact hierarchical generalised least squares per residual clique (two passes);
- :mod:`.raking` — iterative proportional fitting of children-by-cells arrays to their margins;
- :mod:`.nonnegative` — non-negative tables, children summing to parents exactly, top-down;
- :mod:`.rounding` — controlled rounding to integers keeping the hierarchy and invariants (max-flow).

All of it is post-processing of released noisy answers: it spends no privacy budget.
"""
from .gls import hierarchical_gls
from .hierarchy import Hierarchy
from .nonnegative import nonnegative_tables
from .rounding import controlled_rounding

__all__ = ["Hierarchy", "controlled_rounding", "hierarchical_gls", "nonnegative_tables"]
