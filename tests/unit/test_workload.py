"""Workload language: config syntax, per-attribute and joint query matrices (hand-built), errors."""
from __future__ import annotations

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import WorkloadError
from privcube.core.query_types import QueryType, attribute_matrix, joint_matrix, parse_query_type
from privcube.core.workload import Workload, all_kway, hybrid, mixed, parse_workload

DOM = Domain(("age", "sex", "edu", "hours"), (4, 2, 3, 5))


# ------------------------------------------------------------------ query matrices, built by hand
def test_identity_total_prefix() -> None:
    np.testing.assert_array_equal(attribute_matrix(QueryType("identity"), 3), np.eye(3))
    np.testing.assert_array_equal(attribute_matrix(QueryType("total"), 3), [[1, 1, 1]])
    np.testing.assert_array_equal(attribute_matrix(QueryType("prefix"), 4),
                                  [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])


def test_allrange() -> None:
    expect = [[1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 1, 0], [0, 1, 1], [0, 0, 1]]  # [s,e], s ≤ e
    np.testing.assert_array_equal(attribute_matrix(QueryType("allrange"), 3), expect)
    assert attribute_matrix(parse_query_type("ranges", "t"), 10).shape == (55, 10)  # n(n+1)/2


def test_range_fixed_width() -> None:
    m = attribute_matrix(parse_query_type({"type": "range", "width": 2}, "t"), 4)
    np.testing.assert_array_equal(m, [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
    with pytest.raises(WorkloadError, match="width 5"):
        attribute_matrix(parse_query_type({"type": "range", "width": 5}, "t"), 4)


def test_range_without_width_means_allrange() -> None:
    """`queries: range` (no width) is every interval, as HDMM and QuerySmasher users mean it."""
    for spec in ("range", {"type": "range"}, "Range"):
        qt = parse_query_type(spec, "t")
        assert qt == QueryType("allrange")
        assert attribute_matrix(qt, 5).shape == (15, 5)  # n(n+1)/2 intervals
    wl = parse_workload([{"attributes": ["age"], "queries": "range"}], Domain(["age"], [4]))
    assert wl.groups[0].query_types() == {"age": "allrange"}
    assert parse_query_type({"type": "range", "width": 2}, "t") == QueryType("range", (("width", 2),))


def test_circular() -> None:
    m = attribute_matrix(QueryType("circular"), 3)
    expect = [[1, 0, 0], [1, 1, 0], [1, 1, 1],   # start 0, lengths 1..3
              [0, 1, 0], [0, 1, 1], [1, 1, 1],   # start 1 wraps
              [0, 0, 1], [1, 0, 1], [1, 1, 1]]   # start 2 wraps
    np.testing.assert_array_equal(m, expect)


def test_affine_and_absdiff() -> None:
    # cells in C order over (a ∈ 0..1) × (b ∈ 0..2): (0,0) (0,1) (0,2) (1,0) (1,1) (1,2)
    aff = joint_matrix(QueryType("affine"), 2, 3)
    expect = [[1, 0, 0, 0, 0, 0],   # a+b ≤ 0
              [1, 1, 0, 1, 0, 0],   # a+b ≤ 1
              [1, 1, 1, 1, 1, 0],   # a+b ≤ 2
              [1, 1, 1, 1, 1, 1]]   # a+b ≤ 3
    np.testing.assert_array_equal(aff, expect)
    absd = joint_matrix(parse_query_type("abs_diff", "t"), 2, 3)
    expect = [[1, 0, 0, 0, 1, 0],   # |a-b| ≤ 0
              [1, 1, 0, 1, 1, 1],   # |a-b| ≤ 1
              [1, 1, 1, 1, 1, 1]]   # |a-b| ≤ 2
    np.testing.assert_array_equal(absd, expect)


def test_explicit_matrix() -> None:
    qt = parse_query_type({"type": "explicit", "matrix": [[1, -1, 0], [0, 2, 0]]}, "t")
    np.testing.assert_array_equal(attribute_matrix(qt, 3), [[1, -1, 0], [0, 2, 0]])
    assert str(qt) == "explicit(2x3)"  # shape shown in plans and answers/index.json (was "explicit()")
    assert str(parse_query_type({"type": "range", "width": 2}, "t")) == "range(width=2)" and str(qt.__class__("total")) == "total"
    with pytest.raises(WorkloadError, match="3 columns but the attribute has size 4"):
        attribute_matrix(qt, 4)
    with pytest.raises(WorkloadError, match="matrix"):
        parse_query_type({"type": "explicit"}, "t")


def test_random_paper_seed_convention() -> None:
    """QS experiments: np.random.seed(42+n); W1 = rand(3n,n) < .3; W2 = rand(3n², n²) < .3 (one stream)."""
    n = 4
    np.random.seed(42 + n)
    w1 = (np.random.rand(3 * n, n) < 0.3).astype(float)
    w2 = (np.random.rand(3 * n * n, n * n) < 0.3).astype(float)
    q1 = parse_query_type({"type": "random", "generator": "mt19937", "seed": 42 + n}, "t")
    q2 = parse_query_type({"type": "random", "generator": "mt19937", "seed": 42 + n, "offset": 3 * n * n}, "t")
    np.testing.assert_array_equal(attribute_matrix(q1, n), w1)
    np.testing.assert_array_equal(joint_matrix(q2, n, n), w2)
    # default generator: numpy's default_rng(seed), reproducible and seed-dependent
    a = joint_matrix(parse_query_type({"type": "random", "seed": 7}, "t"), 2, 3)
    np.testing.assert_array_equal(a, (np.random.default_rng(7).random((18, 6)) < 0.3).astype(float))
    with pytest.raises(WorkloadError, match="generator"):
        attribute_matrix(parse_query_type({"type": "random", "generator": "xorshift"}, "t"), 3)


# ------------------------------------------------------------------ config syntax
def test_attributes_entry_in_domain_order_with_weight() -> None:
    wl = parse_workload([{"attributes": ["edu", "age"], "queries": {"age": "prefix", "edu": "allrange"},
                          "weight": 2.5}], DOM)
    (g,) = wl.groups
    assert g.attributes == ("age", "edu") and g.weight == 2.5
    assert g.query_types() == {"age": "prefix", "edu": "allrange"}
    expect = np.kron(attribute_matrix(QueryType("prefix"), 4), attribute_matrix(QueryType("allrange"), 3))
    np.testing.assert_array_equal(g.matrix(DOM), expect)
    assert g.num_queries(DOM) == 4 * 6
    # a comma-separated string is accepted for 'attributes'
    assert parse_workload([{"attributes": "hours, sex"}], DOM).groups[0].attributes == ("sex", "hours")


def test_kway_with_default_mapping() -> None:
    wl = parse_workload([{"kway": 2, "queries": {"age": "prefix", "hours": "prefix", "default": "identity"}}], DOM)
    assert [g.attributes for g in wl] == [("age", "sex"), ("age", "edu"), ("age", "hours"),
                                         ("sex", "edu"), ("sex", "hours"), ("edu", "hours")]
    types = {g.attributes: g.query_types() for g in wl}
    assert types[("age", "hours")] == {"age": "prefix", "hours": "prefix"}
    assert types[("sex", "edu")] == {"sex": "identity", "edu": "identity"}
    assert all(g.weight == 1.0 for g in wl)
    # a single mapping is one entry; kway 0 is the total
    assert len(parse_workload({"kway": 1}, DOM)) == 4
    (t,) = parse_workload([{"kway": 0}], DOM).groups
    assert t.attributes == () and t.num_queries(DOM) == 1


def test_joint_types_named_like_per_attribute_types() -> None:
    wl = parse_workload([{"kway": 2, "queries": "affine"}], DOM)
    assert len(wl) == 6
    g = next(g for g in wl if g.attributes == ("age", "edu"))
    assert len(g.factors) == 1 and g.factors[0].attributes == ("age", "edu")
    np.testing.assert_array_equal(g.matrix(DOM), joint_matrix(QueryType("affine"), 4, 3))
    assert g.num_queries(DOM) == 4 + 3 - 1
    g = parse_workload([{"attributes": ["hours", "age"], "queries": "abs-diff"}], DOM).groups[0]
    assert g.num_queries(DOM) == 5 and g.query_types() == {"age": "abs-diff", "hours": "abs-diff"}
    # random stands on one attribute (per-attribute) or on two (joint)
    one = parse_workload([{"kway": 1, "queries": {"type": "random", "seed": 1}}], DOM)
    assert [g.num_queries(DOM) for g in one] == [12, 6, 9, 15]
    two = parse_workload([{"attributes": ["age", "sex"], "queries": "random"}], DOM).groups[0]
    assert two.num_queries(DOM) == 3 * 8 and len(two.factors) == 1


def test_round_trip_to_config() -> None:
    wl = parse_workload([{"kway": 2, "queries": {"age": {"type": "range", "width": 2}}, "weight": 3},
                         {"attributes": ["sex", "edu"], "queries": "affine"}], DOM)
    again = Workload.from_config(wl.to_config(), DOM)
    assert again == wl


def test_helpers() -> None:
    assert len(all_kway(DOM, 3)) == 4
    h = hybrid(DOM, [1, 2], ["age", "hours"])
    assert h.groups[0].query_types() == {"age": "prefix"} and h.groups[1].query_types() == {"sex": "identity"}
    m = mixed(Domain(tuple("abcd"), (3,) * 4))
    sizes = [len(g.attributes) for g in m]
    assert sizes == [1] * 4 + [2] * 6 + [3] * 4
    n = 3
    assert sum(g.num_queries(m.domain) for g in m) == 4 * n * (n + 1) // 2 + 6 * (2 * n - 1) + 4 * n**3


# ------------------------------------------------------------------ errors name the key, attribute or type
@pytest.mark.parametrize("entries,match", [
    ([{"attributes": ["age", "colour"]}], "colour"),
    ([{"kway": 1, "queries": {"colour": "prefix"}}], "colour"),
    ([{"kway": 1, "queries": {"age": "zigzag"}}], r"attribute 'age'.*zigzag"),
    ([{"kway": 2, "queries": "wavelet"}], "unknown query type 'wavelet'"),
    ([{"attributes": ["age"], "queries": "affine"}], "affine"),
    ([{"attributes": ["age", "sex", "edu"], "queries": "abs-diff"}], "abs-diff"),
    ([{"attributes": ["age", "sex"], "queries": {"age": "affine", "sex": "prefix"}}], "affine"),
    ([{"kway": 5}], "kway"),
    ([{"kway": 1, "attributes": ["age"]}], "exactly one of 'attributes' or 'kway'"),
    ([{"kway": 1, "weight": 0}], "weight"),
    ([{"kway": 1, "weight": "heavy"}], "weight"),
    ([{"kway": 1, "querys": "prefix"}], "querys"),
    ([{"kway": 1, "queries": {"age": {"width": 3}}}], "'type'"),
    ([{"attributes": ["age", "sex"], "queries": {"edu": "prefix"}}], r"\['edu'\] that are not in this entry"),
    ([], "non-empty"),
])
def test_errors_name_what_is_wrong(entries: list, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        parse_workload(entries, DOM)


def test_error_names_entry_index() -> None:
    with pytest.raises(WorkloadError, match="workload entry 1"):
        parse_workload([{"kway": 1}, {"kway": 1, "queries": "nope"}], DOM)


def test_hybrid_joint_table3_rules() -> None:
    """QS Table 3 helper: 1-way prefix (numeric) / identity; joint type on pairs with (d_i−1)(d_j−1) ≤ limit,
    Kronecker prefix/identity above it (categorical pairs get the joint type too)."""
    from privcube.core.workload import hybrid_joint

    wl = hybrid_joint(DOM, ["age", "hours"], "abs-diff", limit=10)  # (4−1)(5−1) = 12 > 10
    by = {g.attributes: g for g in wl}
    assert len(wl) == 4 + 6
    assert by[("age",)].query_types() == {"age": "prefix"} and by[("sex",)].query_types() == {"sex": "identity"}
    assert by[("sex", "edu")].query_types() == {"sex": "abs-diff", "edu": "abs-diff"}
    assert by[("age", "hours")].query_types() == {"age": "prefix", "hours": "prefix"}
    assert by[("edu", "hours")].query_types() == {"edu": "abs-diff", "hours": "abs-diff"}  # 2·4 = 8 ≤ 10
    assert by[("age", "hours")].num_queries(DOM) == 4 * 5
    assert by[("sex", "edu")].num_queries(DOM) == 3  # max(d_i, d_j) thresholds
    full = hybrid_joint(DOM, ["age"], "affine", limit=None)
    assert all(len(g.factors) == 1 and g.factors[0].query.name == "affine" for g in full if len(g.attributes) == 2)
    with pytest.raises(WorkloadError, match="joint"):
        hybrid_joint(DOM, ["age"], "prefix")
    with pytest.raises(WorkloadError, match="numeric attribute"):
        hybrid_joint(DOM, ["nope"], "affine")


# ------------------------------------------------------------------ query-type parameters are checked up front
@pytest.mark.parametrize("queries,match", [
    ({"type": "range", "width": 9}, r"attribute 'age'.*'width' is 9.*\[1, 4\]"),  # wider than age (4)
    ({"type": "range", "width": -2}, r"'width' must be an integer >= 1, got -2"),
    ({"type": "range", "width": 2.5}, r"'width' must be an integer >= 1, got 2.5"),  # not truncated to 2
    ({"type": "range", "width": "abc"}, r"'width' must be an integer >= 1, got 'abc'"),
    ({"type": "range", "width": True}, r"'width' must be an integer"),
    ({"type": "prefix", "width": 2}, r"'prefix' has no parameter\(s\) \['width'\]"),
    ({"type": "random", "sede": 5}, r"'random' has no parameter\(s\) \['sede'\]"),  # typo not ignored
    ({"type": "random", "seed": "x"}, r"'seed' must be an integer >= 0, got 'x'"),
    ({"type": "random", "seed": -1}, r"'seed' must be an integer >= 0"),
    ({"type": "random", "p": 1.5}, r"'p' must be a number in \(0, 1\], got 1.5"),
    ({"type": "random", "rows_per_cell": 0}, r"'rows_per_cell' must be an integer >= 1"),
    ({"type": "random", "generator": "mt19937", "seed": 2**40}, r"below 2\*\*32"),
    ({"type": "explicit", "matrix": [[1, 0, 1, 0]]}, r"attribute 'sex'.*4 columns but the attribute has size 2"),
    ({"type": "explicit", "matrix": [[1, 0, 1], [0, 1]]}, r"equally long rows"),
    ({"type": "explicit", "matrix": [[1, "a", 1]]}, r"equally long rows of numbers"),
    ({"type": "explicit", "matrix": [[1, float("nan"), 0, 0]]}, r"non-finite"),
    ({"type": "explicit", "matrix": []}, r"at least one row"),
])
def test_query_type_parameters_checked(queries: dict, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        parse_workload([{"attributes": ["age", "sex"] if "matrix" in queries else ["age"], "queries": queries}],
                       DOM)


def test_query_type_parameters_normalised_and_python_types_checked() -> None:
    from privcube.core.workload import group

    g = parse_workload([{"attributes": ["hours"], "queries": {"type": "range", "width": 3.0}}], DOM).groups[0]
    assert g.factors[0].query == QueryType("range", (("width", 3),))
    assert g.num_queries(DOM) == 3  # 5 - 3 + 1 windows
    with pytest.raises(WorkloadError, match=r"attribute 'sex'.*'width' is 3"):
        group(DOM, ["sex"], QueryType("range", (("width", 3),)))  # built in Python: same checks
