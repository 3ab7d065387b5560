"""Noise stream keys: the identity of a measurement, as parts, and its unambiguous byte encoding.

A key is one str/int or a (nested) tuple of them; every noise stream (PCG64 spawn keys in
:mod:`privcube.privacy.noise`, SHAKE-256 streams in :mod:`privcube.privacy.csprng`) is derived from
:func:`encode_key` of its parts, so equal keys give equal noise and distinct keys independent noise.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError

KeyPart = str | int | Sequence[Any]


def encode_key(parts: Sequence[Any]) -> bytes:
    """Unambiguous, type-tagged byte encoding of a key (nested tuples/lists of str and int)."""
    out: list[bytes] = []
    for p in parts:
        if isinstance(p, bool):
            raise BudgetError(f"noise key parts must be str, int or tuples of them, got bool {p!r}")
        if isinstance(p, str):
            b = p.encode("utf-8")
            out.append(b"s" + len(b).to_bytes(8, "big") + b)
        elif isinstance(p, (int, np.integer)):
            b = str(int(p)).encode("ascii")
            out.append(b"i" + len(b).to_bytes(8, "big") + b)
        elif isinstance(p, (tuple, list)):
            b = encode_key(p)
            out.append(b"t" + len(b).to_bytes(8, "big") + b)
        else:
            raise BudgetError(f"noise key parts must be str, int or tuples of them, got {type(p).__name__} {p!r}")
    return b"".join(out)


def as_key(key: KeyPart | Sequence[Any]) -> tuple[Any, ...]:
    """A key given as one str/int, or as a tuple/list of parts, becomes the part tuple."""
    if isinstance(key, (tuple, list)):
        return tuple(key)
    return (key,)
