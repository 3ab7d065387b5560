"""Cryptographically secure uniform bits for the exact samplers in :mod:`privcube.privacy.discrete`.

Two modes behind one interface, :class:`RandomBits`:

- ``RandomBits.os()``: bytes from the operating system's CSPRNG (``secrets.token_bytes``), read in
  blocks and consumed byte by byte. Nothing is reproducible; this is the mode for unseeded runs.
- ``RandomBits.keyed(seed, *key)``: a deterministic random bit generator for seeded runs. The key
  ``K = SHA-256(tag ‖ seed ‖ key)`` (key parts encoded exactly as the float noise source encodes
  them) drives SHAKE-256 in counter mode: block ``i`` is ``SHAKE-256(K ‖ i)``. Equal (seed, key)
  give the same stream on any machine and Python version; different keys give independent streams.
  The stream is only as secret as the seed: a recorded seed makes the noise reproducible by anyone.

Integers are drawn without bias: ``randbelow(n)`` takes ``⌈log₂ n⌉`` bits (rounded up to whole bytes,
then masked) and rejects values ``≥ n``, so each value in ``[0, n)`` has probability exactly ``1/n``.
``bernoulli(num, den)`` is ``randbelow(den) < num``: exactly ``num/den``.
"""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError
from privcube.privacy.keys import encode_key

_BLOCK = 4096  # bytes drawn per refill (one syscall or one SHAKE-256 call)
_TAG = b"privcube-csprng-v1\x00"


def _check_int(value: Any, name: str, *, minimum: int) -> int:
    """Validate an integer parameter (not bool) with a lower bound, naming it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise BudgetError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def _seed_bytes(seed: int | bytes) -> bytes:
    """Type-tagged, length-prefixed encoding of a seed (non-negative int or bytes)."""
    if isinstance(seed, (bytes, bytearray)):
        b = bytes(seed)
        return b"b" + len(b).to_bytes(8, "big") + b
    s = _check_int(seed, "seed", minimum=0)
    b = str(s).encode("ascii")
    return b"i" + len(b).to_bytes(8, "big") + b


class RandomBits:
    """A source of uniform bytes (OS CSPRNG or keyed SHAKE-256 DRBG) with exact integer/Bernoulli draws."""

    __slots__ = ("_key", "_counter", "_buf", "_pos")

    def __init__(self, key: bytes | None) -> None:
        """Use :meth:`os` or :meth:`keyed`; ``key=None`` means OS CSPRNG, else the 32-byte DRBG key."""
        self._key = key
        self._counter = 0
        self._buf = b""
        self._pos = 0

    @classmethod
    def os(cls) -> RandomBits:
        """Uniform bytes from the operating system's CSPRNG (not reproducible)."""
        return cls(None)

    @classmethod
    def keyed(cls, seed: int | bytes, *key: Any) -> RandomBits:
        """Deterministic SHAKE-256 counter-mode stream determined by (seed, key) alone."""
        if not key:
            raise BudgetError("key must name the stream, e.g. ('residual', 3); got none")
        parts: Sequence[Any] = key
        digest = hashlib.sha256(_TAG + _seed_bytes(seed) + encode_key(parts)).digest()
        return cls(digest)

    @property
    def deterministic(self) -> bool:
        """Whether this stream is a keyed DRBG (reproducible) rather than the OS CSPRNG."""
        return self._key is not None

    def _refill(self) -> None:
        """Replace the exhausted buffer with the next block."""
        if self._key is None:
            self._buf = secrets.token_bytes(_BLOCK)
        else:
            self._buf = hashlib.shake_256(self._key + self._counter.to_bytes(16, "big")).digest(_BLOCK)
            self._counter += 1
        self._pos = 0

    def randbytes(self, n: int) -> bytes:
        """The next ``n`` uniform bytes of the stream."""
        n = _check_int(n, "n", minimum=0)
        out = bytearray()
        while len(out) < n:
            if self._pos >= len(self._buf):
                self._refill()
            take = min(n - len(out), len(self._buf) - self._pos)
            out += self._buf[self._pos : self._pos + take]
            self._pos += take
        return bytes(out)

    def _bits(self, k: int) -> int:
        """A uniform integer in [0, 2**k) from ⌈k/8⌉ fresh bytes (internal, unchecked)."""
        nb = (k + 7) >> 3
        pos = self._pos
        if pos + nb <= len(self._buf):
            self._pos = pos + nb
            v = int.from_bytes(self._buf[pos : pos + nb], "little")
        else:
            v = int.from_bytes(self.randbytes(nb), "little")
        return v & ((1 << k) - 1)

    def randbits(self, k: int) -> int:
        """A uniform integer in [0, 2**k)."""
        k = _check_int(k, "k", minimum=0)
        return self._bits(k) if k else 0

    def _randbelow(self, n: int) -> int:
        """Uniform on [0, n) by masked rejection (internal, n ≥ 1 unchecked)."""
        k = (n - 1).bit_length()
        if k == 0:
            return 0
        while True:
            v = self._bits(k)
            if v < n:
                return v

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), exactly (no modulo bias)."""
        return self._randbelow(_check_int(n, "n", minimum=1))

    def _bernoulli(self, num: int, den: int) -> bool:
        """True with probability num/den (internal, 0 ≤ num ≤ den, den ≥ 1 unchecked)."""
        return self._randbelow(den) < num

    def bernoulli(self, num: int, den: int) -> bool:
        """True with probability exactly ``num/den`` (integers, 0 ≤ num ≤ den, den ≥ 1)."""
        den = _check_int(den, "den", minimum=1)
        num = _check_int(num, "num", minimum=0)
        if num > den:
            raise BudgetError(f"num must not exceed den (a probability ≤ 1), got {num}/{den}")
        return self._bernoulli(num, den)

    def uint64(self, size: int) -> np.ndarray:
        """``size`` uniform 64-bit unsigned integers (for the vectorised exact batch samplers)."""
        size = _check_int(size, "size", minimum=0)
        return np.frombuffer(self.randbytes(8 * size), dtype="<u8").astype(np.uint64)

    def __getstate__(self) -> None:
        """Refuse pickling: a copied stream would repeat its bytes (derive streams by key instead)."""
        raise TypeError("RandomBits is not picklable: ship the noise source and derive the stream by key")

    def __repr__(self) -> str:
        """Show the mode only, never the key."""
        return "RandomBits(<keyed drbg>)" if self._key is not None else "RandomBits(<os csprng>)"


__all__ = ["RandomBits"]
