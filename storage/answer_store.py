"""The run's tensor store (``store.zarr``): every query group's noisy answers and the mechanism's own arrays.

Every query group's answers are stored as 1-D arrays ``group-NNNN-<label>.estimate`` and ``.variance``
(query order and name of ``answers/group-NNNN-<label>.parquet``; attrs name the group's attributes, query
types and weight); marginal groups also as an ``estimate`` tensor shaped like the marginal, and with
post-processing as ``group-...published`` and a ``published`` tensor. Arrays are written concurrently
(each costs a few file-system round trips); on resume, arrays an interrupted attempt already committed
(renamed into place) are kept.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privcube.storage.outputs import answer_file_stem
from privcube.storage.zarr_store import TensorStore, marginal_name

Item = tuple[str, np.ndarray, dict[str, Any] | None, Sequence[str] | None]  # TensorStore.write_many's items


def write_tensors(path: Path, domain: Any, result: Any, keep_existing: bool = False) -> None:
    """Persist ``result``'s private (noisy) answer tensors and its own arrays (``result.tensors``) in the
    zarr store at ``path``; ``keep_existing`` (resume) leaves arrays already committed as they are.
    All arrays go through one ``TensorStore.write_many`` (concurrent writes; each appears only once
    every write has succeeded)."""
    store = TensorStore(path, domain=domain)
    done = set(store.names()) if keep_existing else set()
    items: list[Item] = []
    for i, ans in enumerate(result.answers):
        items += _answer_items(domain, i, ans)
    for name, arr in result.tensors.items():
        items.append((name, np.asarray(arr), result.tensor_attrs.get(name), None))
    store.write_many([it for it in items if it[0] not in done])
    store.cleanup()  # temporaries left by an interrupted earlier attempt (resume)


def _answer_items(domain: Any, i: int, ans: Any) -> list[Item]:
    """The arrays of query group ``i``'s answers: per-query 1-D arrays and, for a marginal group, the
    marginal-shaped tensors (named and attributed as ``TensorStore.write_marginal`` names them)."""
    items: list[Item] = []
    g = ans.group
    if g.is_marginal and g.attributes:
        shape = domain.shape_of(g.attributes)
        for kind, values in (("estimate", ans.estimate), ("published", ans.published)):
            if values is not None:
                meta = {"attributes": list(g.attributes), "shape": list(shape), "kind": kind}
                items.append((marginal_name(g.attributes, kind), np.asarray(values, dtype=float).reshape(shape),
                              meta, g.attributes))
    stem = answer_file_stem(i, g)
    meta = {"group": i, "group_attributes": list(g.attributes), "queries": g.query_types(), "weight": g.weight,
            "answers_file": f"answers/{stem}.parquet"}
    est = np.asarray(ans.estimate, dtype=float).ravel()
    for quantity, values in (("estimate", est), ("variance", ans.variance), ("published", ans.published)):
        if values is not None:
            items.append((f"{stem}.{quantity}", np.broadcast_to(np.asarray(values, dtype=float).ravel(), est.shape),
                          {**meta, "quantity": quantity}, None))
    return items


__all__ = ["write_tensors"]
