"""Schema loading (domain JSON and rich YAML/JSON), labels, validation errors, and the infer helper."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import DataError, DomainError
from privcube.storage.infer import infer_schema
from privcube.storage.schema import Attribute, Schema, code_dtype, load_schema

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

RICH_YAML = """
attributes:
  - {name: age, type: numeric, bins: [0, 18, 25, 35, 50, 65, 120], missing: code}
  - {name: sex, type: categorical, categories: [F, M]}
  - {name: created, type: date, bins: ["2010-01-01", "2012-01-01", "2014-07-01"]}
  - {name: workclass, type: integer, size: 9}
"""


def test_rich_yaml_sizes_and_labels(tmp_path: Path) -> None:
    """A rich YAML schema yields the right domain sizes (missing code included) and labels."""
    p = tmp_path / "s.yaml"
    p.write_text(RICH_YAML)
    s = load_schema(p)
    assert s.names == ("age", "sex", "created", "workclass")
    assert s.domain == Domain(("age", "sex", "created", "workclass"), (7, 2, 2, 9))
    assert s.labels("age") == ["[0, 18)", "[18, 25)", "[25, 35)", "[35, 50)", "[50, 65)", "[65, 120)", "missing"]
    assert s.labels("sex") == ["F", "M"]
    assert s.labels("created") == ["[2010-01-01, 2012-01-01)", "[2012-01-01, 2014-07-01)"]
    assert s.labels("workclass") == [str(i) for i in range(9)]
    assert s.attribute("age").missing_code == 6


def test_round_trip_dict_yaml_json(tmp_path: Path) -> None:
    """to_dict / save round-trip to an equal schema in both YAML and JSON."""
    import yaml

    s = load_schema(yaml.safe_load(RICH_YAML))
    assert load_schema(s.to_dict()) == s
    assert load_schema(s.save(tmp_path / "x.yaml")) == s
    assert load_schema(s.save(tmp_path / "x.json")) == s
    labelled = Schema((Attribute("w", "integer", 3, missing="code", labels_=("a", "b")),))
    assert labelled.labels("w") == ["a", "b", "missing"]
    assert load_schema(labelled.to_dict()) == labelled


def test_domain_json_formats(tmp_path: Path) -> None:
    """A {column: size} mapping or file gives an integer-kind schema with the same domain."""
    p = tmp_path / "d.json"
    p.write_text(json.dumps({"b": 3, "a": 300}))
    s = load_schema(p)
    assert s.domain.to_dict() == {"b": 3, "a": 300}
    assert all(a.kind == "integer" for a in s)
    assert s.attribute("a").dtype == np.uint16 and s.attribute("b").dtype == np.uint8
    assert Schema.from_domain(Domain(("x",), (5,))).labels("x") == ["0", "1", "2", "3", "4"]
    assert load_schema(Domain(("x",), (5,))).domain.shape == (5,)


def test_shared_adult_domain_loads() -> None:
    """The shared adult domain JSON loads with its declared sizes."""
    path = DATA / "adult" / "adult-domain.json"
    if not path.exists():
        pytest.skip(f"shared data not present at {path}")
    expected = json.loads(path.read_text())
    assert load_schema(path).domain.to_dict() == expected


def test_project_and_lookup() -> None:
    """project keeps the given order; unknown names raise DomainError naming them."""
    s = Schema.from_dict({"a": 2, "b": 3, "c": 4})
    assert s.project(["c", "a"]).domain == Domain(("c", "a"), (4, 2))
    with pytest.raises(DomainError, match="'zz'"):
        s.attribute("zz")
    with pytest.raises(DomainError, match="repeats"):
        s.project(["a", "a"])


def test_code_dtype_bounds() -> None:
    """Code dtype is the smallest unsigned type holding size-1."""
    assert code_dtype(256) == np.uint8 and code_dtype(257) == np.uint16
    assert code_dtype(65537) == np.uint32


@pytest.mark.parametrize(
    "entry, pattern",
    [
        ({"name": "x", "type": "float"}, r"attribute 'x': type 'float'"),
        ({"name": "x"}, r"attribute 'x': key 'type' is missing"),
        ({"type": "integer", "size": 2}, r"key 'name'"),
        ({"name": "x", "type": "integer", "size": 2, "colour": 1}, r"attribute 'x': unknown key 'colour'"),
        ({"name": "x", "type": "integer"}, r"attribute 'x': integer attributes need key 'size'"),
        ({"name": "x", "type": "integer", "size": 0}, r"attribute 'x': size 0"),
        ({"name": "x", "type": "numeric"}, r"attribute 'x': numeric attributes need key 'bins'"),
        ({"name": "x", "type": "numeric", "bins": [0, 5, 5]}, r"attribute 'x': bin edges must increase"),
        ({"name": "x", "type": "numeric", "bins": [1]}, r"attribute 'x': numeric needs at least two"),
        ({"name": "x", "type": "numeric", "bins": [0, "a"]}, r"attribute 'x': bin edge 'a'"),
        ({"name": "x", "type": "date", "bins": ["2010-01-01", "nope"]}, r"attribute 'x': date bin edge 'nope'"),
        ({"name": "x", "type": "date", "bins": ["2012-01-01", "2010-01-01"]}, r"attribute 'x': bin edges"),
        ({"name": "x", "type": "categorical", "categories": ["a", "a"]}, r"attribute 'x': categories repeat \['a'\]"),
        ({"name": "x", "type": "categorical", "categories": []}, r"attribute 'x': categorical needs"),
        ({"name": "x", "type": "categorical", "categories": ["a"], "missing": "drop"}, r"attribute 'x': missing 'drop'"),
        ({"name": "x", "type": "categorical", "categories": ["a", "missing"], "missing": "code"}, r"clashes"),
        ({"name": "x", "type": "integer", "size": 2, "labels": ["a"]}, r"attribute 'x': 1 labels given for size 2"),
    ],
)
def test_rich_schema_errors(entry: dict, pattern: str) -> None:
    """Each malformed attribute raises DomainError naming the attribute or key."""
    with pytest.raises(DomainError, match=pattern):
        load_schema({"attributes": [entry]})


def test_schema_level_errors(tmp_path: Path) -> None:
    """Top-level problems: duplicates, bad sizes, unknown keys, missing or invalid files."""
    dup = {"attributes": [{"name": "a", "type": "integer", "size": 2}] * 2}
    with pytest.raises(DomainError, match=r"repeats attribute\(s\) \['a'\]"):
        load_schema(dup)
    with pytest.raises(DomainError, match=r"attribute 'b' has value 'x'"):
        load_schema({"a": 2, "b": "x"})
    with pytest.raises(DomainError, match=r"unknown top-level key 'extra'"):
        load_schema({"attributes": [{"name": "a", "type": "integer", "size": 2}], "extra": 1})
    with pytest.raises(DomainError, match="does not exist"):
        load_schema(tmp_path / "none.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(DomainError, match="not valid JSON"):
        load_schema(bad)


def test_infer_schema_is_labelled_non_private() -> None:
    """infer_schema proposes categories/bins from observed data and returns the NON-PRIVATE warning."""
    rng = np.random.default_rng(0)
    n = 500
    df = pd.DataFrame({
        "colour": rng.choice(["red", "green", "blue"], n),
        "score": rng.normal(50, 10, n),
        "code": rng.integers(0, 4, n),
        "when": pd.to_datetime("2015-01-01") + pd.to_timedelta(rng.integers(0, 900, n), unit="D"),
        "uid": [f"id{i}" for i in range(n)],
    })
    df.loc[3, "score"] = np.nan
    schema, warning = infer_schema(df, max_categories=20, n_bins=5)
    assert warning.startswith("NON-PRIVATE: this schema was derived from the data")
    assert "uid" in warning and "uid" not in schema
    assert schema.attribute("colour").categories == ("blue", "green", "red")
    assert schema.attribute("code").kind == "integer" and schema.attribute("code").size == int(df["code"].max()) + 1
    sc = schema.attribute("score")
    assert sc.kind == "numeric" and sc.missing == "code" and sc.bins[0] == pytest.approx(df["score"].min())
    assert schema.attribute("when").kind == "date"
    # the proposed schema encodes the very data it came from
    from privcube.storage.ingest import encode_frame

    enc = encode_frame(df.drop(columns="uid"), schema)
    assert int(enc["score"].iloc[3]) == sc.missing_code
    with pytest.raises(DataError, match="'nope'"):
        infer_schema(df, columns=["nope"])
