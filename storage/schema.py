"""Public schema: how raw columns map to integer codes (categories, bins, missing policy).

Two formats are accepted: the common ``{column: size}`` domain JSON (integer-coded data) and a rich
YAML/JSON schema ``{attributes: [{name, type, ...}, ...]}``. The schema is public input; it is never
derived from private data here (see ``privcube.storage.infer`` for the non-private helper). A rich schema
may carry the top-level key ``inferred_from_data: true``: ``privcube schema infer`` writes it, and every run
whose schema carries it warns (``report.json`` ``warnings``, the report page, one stderr line) that the
domain came from the private data and is not covered by the DP guarantee (:func:`inferred_warning`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import DomainError

KINDS = ("integer", "categorical", "numeric", "date")
INFERRED_KEY = "inferred_from_data"
MISSING_POLICIES = ("error", "code")
MISSING_LABEL = "missing"

_ALLOWED_KEYS = {
    "integer": {"name", "type", "kind", "size", "labels", "missing", "clip"},
    "categorical": {"name", "type", "kind", "categories", "missing"},
    "numeric": {"name", "type", "kind", "bins", "missing", "clip"},
    "date": {"name", "type", "kind", "bins", "missing", "clip"},
}


def code_dtype(size: int) -> np.dtype:
    """Smallest unsigned integer dtype holding codes ``0..size-1`` (keeps encoded data compact)."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if size - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


def edge_text(x: float) -> str:
    """Render a numeric bin edge compactly (integers without a trailing .0)."""
    if math.isfinite(x) and float(x).is_integer():
        return str(int(x))
    return repr(float(x))


def _parse_date(name: str, value: Any) -> pd.Timestamp:
    """Parse one date bin edge, naming the attribute on failure."""
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise DomainError(f"attribute {name!r}: date bin edge {value!r} is not a date") from None
    if ts is pd.NaT or pd.isna(ts):
        raise DomainError(f"attribute {name!r}: date bin edge {value!r} is not a date")
    if ts.tzinfo is not None:
        ts = ts.tz_convert(None)
    return ts


@dataclass(frozen=True)
class Attribute:
    """One attribute: its kind, its code count ``size`` (including the missing code) and its labels.

    ``size`` is the total number of codes. For ``integer`` attributes the data already holds codes
    ``0..n-1`` and ``missing: code`` adds code ``n`` (so ``size = n + 1``). Categorical attributes
    have ``len(categories)`` codes, numeric and date attributes ``len(bins) - 1`` (left-closed bins
    ``[e_k, e_{k+1})``), each plus one for ``missing: code``.
    """

    name: str
    kind: str
    size: int = 0
    categories: tuple[str, ...] | None = None
    bins: tuple[Any, ...] | None = None
    missing: str = "error"
    clip: bool = False
    labels_: tuple[str, ...] | None = field(default=None, repr=False)
    #: declared by a ``{column: size}`` domain (no schema settings such as ``missing`` were written)
    from_domain: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise DomainError(f"attribute name {name!r} must be a non-empty string")
        if self.kind not in KINDS:
            raise DomainError(f"attribute {name!r}: type {self.kind!r} is not one of {list(KINDS)}")
        if self.missing not in MISSING_POLICIES:
            raise DomainError(
                f"attribute {name!r}: missing {self.missing!r} is not one of {list(MISSING_POLICIES)}"
            )
        if not isinstance(self.clip, bool):
            raise DomainError(f"attribute {name!r}: clip {self.clip!r} must be true or false")
        extra = 1 if self.missing == "code" else 0
        if self.kind == "integer":
            self._check_integer(extra)
        elif self.kind == "categorical":
            self._check_categorical(extra)
        else:
            self._check_bins(extra)

    # validation helpers ---------------------------------------------------------------------
    def _set(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)

    def _check_integer(self, extra: int) -> None:
        s = self.size
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 + extra:
            shown = s.item() if isinstance(s, np.generic) else s
            raise DomainError(f"attribute {self.name!r}: size {shown!r} must be a positive integer")
        self._set("size", int(s))
        if self.categories is not None or self.bins is not None:
            raise DomainError(f"attribute {self.name!r}: integer attributes take no categories/bins")
        if self.labels_ is not None:
            labels = tuple(str(x) for x in self.labels_)
            if len(labels) != self.size - extra:
                raise DomainError(
                    f"attribute {self.name!r}: {len(labels)} labels given for size {self.size - extra}"
                )
            self._set("labels_", labels)

    def _check_categorical(self, extra: int) -> None:
        cats = self.categories
        if cats is None or isinstance(cats, (str, bytes)) or len(tuple(cats)) == 0:
            raise DomainError(f"attribute {self.name!r}: categorical needs a non-empty categories list")
        cats = tuple(category_text(c) for c in cats)
        if len(set(cats)) != len(cats):
            dup = sorted({c for c in cats if cats.count(c) > 1})
            raise DomainError(f"attribute {self.name!r}: categories repeat {dup}")
        if self.missing == "code" and MISSING_LABEL in cats:
            raise DomainError(
                f"attribute {self.name!r}: category {MISSING_LABEL!r} clashes with the missing code"
            )
        if self.bins is not None or self.labels_ is not None or self.clip:
            raise DomainError(f"attribute {self.name!r}: categorical attributes take no bins/labels/clip")
        self._set("categories", cats)
        self._expect_size(len(cats) + extra)

    def _check_bins(self, extra: int) -> None:
        bins = self.bins
        if bins is None or isinstance(bins, (str, bytes)) or len(tuple(bins)) < 2:
            raise DomainError(f"attribute {self.name!r}: {self.kind} needs at least two bin edges")
        if self.categories is not None or self.labels_ is not None:
            raise DomainError(f"attribute {self.name!r}: {self.kind} attributes take no categories")
        if self.kind == "numeric":
            edges: list[Any] = []
            for b in bins:
                if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)):
                    raise DomainError(f"attribute {self.name!r}: bin edge {b!r} is not a number")
                if not math.isfinite(float(b)):
                    raise DomainError(f"attribute {self.name!r}: bin edge {b!r} is not finite")
                edges.append(float(b))
            keyed = edges
        else:
            stamps = [_parse_date(self.name, b) for b in bins]
            keyed = stamps
            edges = [s.isoformat() if (s.hour or s.minute or s.second or s.microsecond or s.nanosecond)
                     else s.strftime("%Y-%m-%d") for s in stamps]
        for a, b, ea, eb in zip(keyed, keyed[1:], edges, edges[1:]):
            if not a < b:
                raise DomainError(
                    f"attribute {self.name!r}: bin edges must increase strictly, got {ea!r} then {eb!r}"
                )
        self._set("bins", tuple(edges))
        self._expect_size(len(edges) - 1 + extra)

    def _expect_size(self, n: int) -> None:
        if self.size not in (0, None) and int(self.size) != n:
            raise DomainError(f"attribute {self.name!r}: size {self.size} does not match its {n} codes")
        self._set("size", n)

    # queries -----------------------------------------------------------------------------------
    @property
    def n_values(self) -> int:
        """Number of codes for present (non-missing) values."""
        return self.size - (1 if self.missing == "code" else 0)

    @property
    def missing_code(self) -> int | None:
        """The code NaN/None maps to (the last code), or None when missing values are errors."""
        return self.size - 1 if self.missing == "code" else None

    @property
    def dtype(self) -> np.dtype:
        """Smallest unsigned dtype that holds this attribute's codes."""
        return code_dtype(self.size)

    def bin_edges(self) -> np.ndarray:
        """Bin edges as float64 (numeric) or datetime64[ns] (date), for searchsorted."""
        if self.bins is None:
            raise DomainError(f"attribute {self.name!r} ({self.kind}) has no bins")
        if self.kind == "numeric":
            return np.asarray(self.bins, dtype=np.float64)
        return np.array([pd.Timestamp(b).to_datetime64() for b in self.bins], dtype="datetime64[ns]")

    def labels(self) -> list[str]:
        """One human-readable label per code, e.g. a category name or a bin range "[18, 25)"."""
        if self.kind == "integer":
            out = list(self.labels_) if self.labels_ is not None else [str(i) for i in range(self.n_values)]
        elif self.kind == "categorical":
            out = list(self.categories or ())
        elif self.kind == "numeric":
            e = [edge_text(x) for x in self.bins or ()]
            out = [f"[{a}, {b})" for a, b in zip(e, e[1:])]
        else:
            e = list(self.bins or ())
            out = [f"[{a}, {b})" for a, b in zip(e, e[1:])]
        if self.missing == "code":
            out.append(MISSING_LABEL)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Rich-schema mapping that ``Attribute.from_dict`` reads back to an equal attribute."""
        d: dict[str, Any] = {"name": self.name, "type": self.kind}
        if self.kind == "integer":
            d["size"] = self.n_values
            if self.labels_ is not None:
                d["labels"] = list(self.labels_)
        elif self.kind == "categorical":
            d["categories"] = list(self.categories or ())
        elif self.kind == "numeric":
            d["bins"] = [int(x) if float(x).is_integer() else float(x) for x in self.bins or ()]
        else:
            d["bins"] = list(self.bins or ())
        if self.missing != "error":
            d["missing"] = self.missing
        if self.clip:
            d["clip"] = True
        return d

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any], where: str = "attribute") -> Attribute:
        """Build from one rich-schema entry, rejecting unknown or missing keys by name."""
        if not isinstance(spec, Mapping):
            raise DomainError(f"{where}: expected a mapping with name and type, got {spec!r}")
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise DomainError(f"{where}: key 'name' is missing or not a string (got {name!r})")
        kind = spec.get("type", spec.get("kind"))
        if kind is None:
            raise DomainError(f"attribute {name!r}: key 'type' is missing (one of {list(KINDS)})")
        if kind not in KINDS:
            raise DomainError(f"attribute {name!r}: type {kind!r} is not one of {list(KINDS)}")
        unknown = sorted(set(spec) - _ALLOWED_KEYS[kind])
        if unknown:
            raise DomainError(
                f"attribute {name!r}: unknown key {unknown[0]!r} for type {kind!r} "
                f"(allowed: {sorted(_ALLOWED_KEYS[kind] - {'kind'})})"
            )
        missing = spec.get("missing", "error")
        clip = spec.get("clip", False)
        if kind == "integer":
            if "size" not in spec:
                raise DomainError(f"attribute {name!r}: integer attributes need key 'size'")
            size = spec["size"]
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                shown = size.item() if isinstance(size, np.generic) else size
                raise DomainError(f"attribute {name!r}: size {shown!r} must be a positive integer")
            labels = spec.get("labels")
            if labels is not None and (isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence)):
                raise DomainError(f"attribute {name!r}: labels must be a list, got {labels!r}")
            extra = 1 if missing == "code" else 0
            return cls(name, kind, int(size) + extra, missing=missing, clip=clip,
                       labels_=tuple(labels) if labels is not None else None)
        if kind == "categorical":
            if "categories" not in spec:
                raise DomainError(f"attribute {name!r}: categorical attributes need key 'categories'")
            cats = spec["categories"]
            if isinstance(cats, (str, bytes)) or not isinstance(cats, Sequence):
                raise DomainError(f"attribute {name!r}: categories must be a list, got {cats!r}")
            return cls(name, kind, categories=tuple(cats), missing=missing)
        if "bins" not in spec:
            raise DomainError(f"attribute {name!r}: {kind} attributes need key 'bins'")
        bins = spec["bins"]
        if isinstance(bins, (str, bytes)) or not isinstance(bins, Sequence):
            raise DomainError(f"attribute {name!r}: bins must be a list, got {bins!r}")
        return cls(name, kind, bins=tuple(bins), missing=missing, clip=clip)


def category_text(c: Any) -> str:
    """Canonical string form of a category (ints as "3", not "3.0")."""
    if isinstance(c, (float, np.floating)) and float(c).is_integer():
        return str(int(c))
    return str(c)


@dataclass(frozen=True)
class Schema:
    """Ordered attributes; the public description of one table's encoding."""

    attributes: tuple[Attribute, ...]
    #: proposed by ``privcube schema infer`` from the data itself (NON-PRIVATE); runs with it warn
    inferred_from_data: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.inferred_from_data, bool):
            raise DomainError(f"schema: {INFERRED_KEY} must be true or false, got {self.inferred_from_data!r}")
        attrs = tuple(self.attributes)
        if not attrs:
            raise DomainError("a schema needs at least one attribute")
        for a in attrs:
            if not isinstance(a, Attribute):
                raise DomainError(f"schema entries must be Attribute, got {a!r}")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise DomainError(f"schema repeats attribute(s) {dup}")
        object.__setattr__(self, "attributes", attrs)

    # construction --------------------------------------------------------------------------------
    @classmethod
    def from_domain(cls, domain: Domain) -> Schema:
        """Integer-kind schema for already-coded data with codes ``0..size-1``."""
        return cls(tuple(Attribute(a, "integer", s, from_domain=True) for a, s in zip(domain.attributes, domain.shape)))

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Schema:
        """Build from ``{attributes: [...]}`` (rich) or ``{column: size}`` (domain JSON)."""
        if not isinstance(spec, Mapping) or not spec:
            raise DomainError("a schema must be a non-empty mapping")
        if "attributes" in spec and not isinstance(spec["attributes"], (int, float)):
            unknown = sorted(set(spec) - {"attributes", INFERRED_KEY})
            if unknown:
                raise DomainError(f"schema: unknown top-level key {unknown[0]!r} "
                                  f"(allowed: ['attributes', '{INFERRED_KEY}'])")
            entries = spec["attributes"]
            if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence) or not entries:
                raise DomainError("schema: key 'attributes' must be a non-empty list")
            inferred = spec.get(INFERRED_KEY, False)
            if not isinstance(inferred, bool):
                raise DomainError(f"schema: {INFERRED_KEY} must be true or false, got {inferred!r}")
            return cls(tuple(Attribute.from_dict(e, f"schema attribute #{i}") for i, e in enumerate(entries)),
                       inferred_from_data=inferred)
        bad = [(k, v) for k, v in spec.items()
               if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))]  # np.int64(4) is a size
        if bad:
            k, v = bad[0]
            raise DomainError(
                f"schema: attribute {k!r} has value {v.item() if isinstance(v, np.generic) else v!r}; a domain "
                "mapping needs integer sizes (or use a rich schema with key 'attributes')"
            )
        return cls.from_domain(Domain.from_mapping({k: int(v) for k, v in spec.items()}))

    # queries -----------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names in schema order."""
        return tuple(a.name for a in self.attributes)

    @property
    def domain(self) -> Domain:
        """The code domain (names and total code counts, missing codes included)."""
        return Domain(self.names, tuple(a.size for a in self.attributes))

    def __len__(self) -> int:
        return len(self.attributes)

    def __iter__(self) -> Iterator[Attribute]:
        return iter(self.attributes)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def attribute(self, name: str) -> Attribute:
        """The attribute called ``name`` (DomainError listing the known names otherwise)."""
        for a in self.attributes:
            if a.name == name:
                return a
        raise DomainError(f"unknown attribute {name!r}; the schema has {list(self.names)}")

    def labels(self, name: str) -> list[str]:
        """One label per code of attribute ``name``."""
        return self.attribute(name).labels()

    def project(self, names: Iterable[str]) -> Schema:
        """Sub-schema on ``names`` in the order given."""
        names = list(names)
        if isinstance(names, str):
            names = [names]
        if len(set(names)) != len(names):
            raise DomainError(f"projection {names} repeats an attribute")
        return Schema(tuple(self.attribute(n) for n in names), inferred_from_data=self.inferred_from_data)

    def to_dict(self) -> dict[str, Any]:
        """Rich-schema mapping (``load_schema(s.to_dict()) == s``); ``inferred_from_data: true`` first when set."""
        marker = {INFERRED_KEY: True} if self.inferred_from_data else {}
        return {**marker, "attributes": [a.to_dict() for a in self.attributes]}

    def save(self, path: str | Path) -> Path:
        """Write the rich schema as YAML (``.yaml``/``.yml``) or JSON (anything else)."""
        p = Path(path)
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            p.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None))
        else:
            p.write_text(json.dumps(self.to_dict(), indent=1))
        return p


def inferred_warning(where: str) -> str:
    """The warning a run gives when the schema of ``where`` (e.g. "table 'users'") carries
    ``inferred_from_data: true``: its domain is not public input, so DP does not cover what it reveals."""
    return (f"the schema of {where} was inferred from the private data ({INFERRED_KEY}: true, written by "
            "`privcube schema infer`): its domain (categories, bin edges, sizes) is not public input, so the "
            "differential-privacy guarantee does not cover what the schema reveals; replace it with a schema "
            "built from public knowledge before releasing these outputs")


def inferred_warnings(schemas: Mapping[str, Any], where: str = "table {name!r} (data.tables.{name})") -> list[str]:
    """One :func:`inferred_warning` per schema in ``schemas`` (name -> Schema) that carries the mark."""
    return [inferred_warning(where.format(name=n)) for n, s in schemas.items()
            if getattr(s, "inferred_from_data", False)]


_DATA_SUFFIXES = (".parquet", ".pq", ".parq", ".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst", ".tsv")


def load_schema(source: str | Path | Mapping[str, Any] | Domain | Schema) -> Schema:
    """Load a schema from a path (JSON/YAML), a mapping, a Domain or a Schema (returned as is)."""
    if isinstance(source, Schema):
        return source
    if isinstance(source, Domain):
        return Schema.from_domain(source)
    if isinstance(source, Mapping):
        return Schema.from_dict(source)
    if not isinstance(source, (str, Path)):
        raise DomainError(f"cannot load a schema from {type(source).__name__} {source!r}")
    p = Path(source)
    not_schema = (f"schema file {str(p)!r} is not a schema file: give a domain JSON {{column: size}} or a schema "
                  "YAML/JSON {attributes: [...]} (privcube schema infer proposes one from data)")
    if p.name.lower().endswith(_DATA_SUFFIXES) and p.is_file():
        raise DomainError(not_schema.replace("is not a schema file", "is a data file, not a schema"))
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise DomainError(f"schema file {str(p)!r} does not exist") from None
    except IsADirectoryError:
        raise DomainError(f"schema path {str(p)!r} is a directory, not a file") from None
    except UnicodeDecodeError:  # a Parquet or other binary file
        raise DomainError(not_schema.replace("is not a schema file", "is not text (a binary or Parquet file?)")) \
            from None
    except OSError as e:
        raise DomainError(f"cannot read schema file {str(p)!r}: {e.strerror or e}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        from privcube.core.yaml_io import DuplicateKeyError, load_yaml, yaml_error_line

        try:
            raw = load_yaml(text)
        except DuplicateKeyError as e:
            raise DomainError(f"schema file {str(p)!r}: {e}") from None
        except yaml.YAMLError as e:
            raise DomainError(f"schema file {str(p)!r} is not valid YAML: {yaml_error_line(e)}") from None
    else:
        from privcube.core.yaml_io import load_json

        try:
            raw = load_json(text)
        except json.JSONDecodeError as e:
            raise DomainError(f"schema file {str(p)!r} is not valid JSON: {e}") from None
        except ValueError as e:  # a repeated key
            raise DomainError(f"schema file {str(p)!r}: {e}") from None
    if not isinstance(raw, Mapping):
        raise DomainError(f"schema file {str(p)!r} must hold a mapping, got {type(raw).__name__}")
    return Schema.from_dict(raw)
