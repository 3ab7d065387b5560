"""The public domain: ordered attribute names and their sizes (an immutable value type).

The domain is public input. It is never inferred from private data (see ``privcube schema infer``
for the loudly labelled, non-private helper).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privcube.core.errors import DomainError


@dataclass(frozen=True)
class Domain:
    """Ordered attributes with their sizes; attribute ``a`` takes codes ``0..size(a)-1``."""

    attributes: tuple[str, ...]
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        attrs = tuple(str(a) for a in self.attributes)
        shape = tuple(int(s) for s in self.shape)
        if len(attrs) != len(shape):
            raise DomainError(f"domain has {len(attrs)} attributes but {len(shape)} sizes")
        if len(set(attrs)) != len(attrs):
            dup = sorted({a for a in attrs if attrs.count(a) > 1})
            raise DomainError(f"domain repeats attribute(s) {dup}")
        for a, s in zip(attrs, shape):
            if s < 1:
                raise DomainError(f"attribute {a!r} has size {s}; sizes must be >= 1")
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "shape", shape)

    # construction -------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, sizes: Mapping[str, int]) -> Domain:
        """Build from ``{attribute: size}`` (insertion order is the attribute order)."""
        if not isinstance(sizes, Mapping) or not sizes:
            raise DomainError("a domain must be a non-empty mapping {attribute: size}")
        out = {}
        for a, s in sizes.items():
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(s) or int(s) != s:  # numpy integers (np.int64(4)) are sizes too
                shown = s.item() if isinstance(s, np.generic) else s
                raise DomainError(f"attribute {a!r} has size {shown!r}; sizes must be positive integers")
            out[str(a)] = int(s)
        return cls(tuple(out), tuple(out.values()))

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        """Read the common ``{column: size}`` domain JSON (Private-PGM / AIM datasets)."""
        from privcube.core.yaml_io import load_json

        p = Path(path)
        try:
            raw = load_json(p.read_text())
        except FileNotFoundError:
            raise DomainError(f"domain file {str(p)!r} does not exist") from None
        except json.JSONDecodeError as e:
            raise DomainError(f"domain file {str(p)!r} is not valid JSON: {e}") from None
        except ValueError as e:  # a repeated column
            raise DomainError(f"domain file {str(p)!r}: {e}") from None
        return cls.from_mapping(raw)

    # queries --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.attributes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.attributes)

    def __contains__(self, attr: object) -> bool:
        return attr in self.attributes

    def size(self, attrs: Iterable[str] | None = None) -> int:
        """Number of cells of the marginal on ``attrs`` (all attributes when None)."""
        if attrs is None:
            return math.prod(self.shape)
        return math.prod(self[a] for a in attrs)

    def __getitem__(self, attr: str) -> int:
        try:
            return self.shape[self.attributes.index(attr)]
        except ValueError:
            raise DomainError(
                f"unknown attribute {attr!r}; the domain has {list(self.attributes)}"
            ) from None

    def index(self, attr: str) -> int:
        """Position of ``attr`` in the attribute order."""
        self[attr]
        return self.attributes.index(attr)

    def canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        """The attribute set ``attrs`` sorted into domain order (the key of a clique)."""
        attrs = list(attrs)
        for a in attrs:
            self[a]
        if len(set(attrs)) != len(attrs):
            raise DomainError(f"attribute set {attrs} repeats an attribute")
        return tuple(sorted(attrs, key=self.attributes.index))

    def project(self, attrs: Sequence[str]) -> Domain:
        """Sub-domain on ``attrs``, in the order given."""
        return Domain(tuple(attrs), tuple(self[a] for a in attrs))

    def shape_of(self, attrs: Iterable[str]) -> tuple[int, ...]:
        return tuple(self[a] for a in attrs)

    def to_dict(self) -> dict[str, int]:
        return dict(zip(self.attributes, self.shape))
