"""Config loading: every key validated, errors name the key, paths resolved, budgets parsed."""
from __future__ import annotations

import json

import pytest

from privcube.config import load_config
from privcube.core.errors import BudgetError, ConfigError, WorkloadError


def base(**over):
    cfg = {
        "domain": {"a": 3, "b": 4, "c": 2},
        "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 2}],
        "privacy": {"epsilon": 1.0, "delta": 1e-9},
    }
    cfg.update(over)
    return cfg


def test_inline_domain_plans_without_data():
    cfg = load_config(base(), need_data=False)
    assert cfg.domain.attributes == ("a", "b", "c")
    assert len(cfg.workload) == 3
    assert cfg.budget.rho == pytest.approx(0.014973, rel=1e-3)
    assert cfg.data_path is None


def test_run_needs_data_path():
    with pytest.raises(ConfigError, match="data.path"):
        load_config(base())


def test_domain_file_and_relative_path(tmp_path):
    (tmp_path / "dom.json").write_text(json.dumps({"x": 2, "y": 5}))
    (tmp_path / "cfg.yaml").write_text(
        "data: {path: d.parquet, domain: dom.json}\nmechanism: residual-planner\n"
        "workload: [{kway: 1}]\nprivacy: {rho: 0.5}\n"
    )
    cfg = load_config(tmp_path / "cfg.yaml")
    assert cfg.domain.to_dict() == {"x": 2, "y": 5}
    assert cfg.data_path == str((tmp_path / "d.parquet").resolve())
    assert cfg.budget.rho == 0.5
    assert cfg.resolved()["resolved"]["domain"] == {"x": 2, "y": 5}


@pytest.mark.parametrize(
    ("over", "err", "needle"),
    [
        ({"mechanism": {"name": "nope"}}, ConfigError, "nope"),
        ({"bogus": 1}, ConfigError, "bogus"),
        ({"privacy": {"epsilon": 0}}, BudgetError, "epsilon"),
        ({"privacy": {"epsilon": -1, "delta": 1e-6}}, BudgetError, "epsilon"),
        ({"privacy": {"epsilon": 1, "delta": 1.5}}, BudgetError, "delta"),
        ({"privacy": {"epsilon": 1, "delta": 0}}, BudgetError, "delta"),
        ({"privacy": {"rho": 0}}, BudgetError, "rho"),
        ({"workload": [{"attributes": ["a", "zz"]}]}, WorkloadError, "zz"),
        ({"workload": [{"kway": 2, "queries": "wavelets"}]}, WorkloadError, "wavelets"),
        ({"workload": [{"kway": 2, "queries": {"qq": "prefix"}}]}, WorkloadError, "qq"),
        ({"workload": []}, WorkloadError, "non-empty"),
    ],
)
def test_bad_config_names_the_culprit(over, err, needle):
    with pytest.raises(err, match=needle):
        load_config(base(**over), need_data=False)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_pure_epsilon_budget():
    cfg = load_config(base(privacy={"epsilon": 2.0}), need_data=False)
    assert cfg.budget.pure and cfg.budget.epsilon == 2.0 and cfg.budget.delta == 0.0


def test_cluster_paths_resolve_against_the_config_folder(tmp_path):
    """local_directory, scheduler_file and TLS files are read here: relative to the config like data paths;
    remote clusters' paths are kept as written."""
    (tmp_path / "dom.json").write_text(json.dumps({"x": 2}))
    body = "data: {path: d.parquet, domain: dom.json}\nmechanism: residual-planner\nworkload: [{kway: 1}]\n" \
           "privacy: {rho: 0.5}\n"
    (tmp_path / "a.yaml").write_text(body + "cluster: {type: local, local_directory: spill, n_workers: 1}\n")
    assert load_config(tmp_path / "a.yaml").cluster == {"type": "local", "local_directory": str(tmp_path / "spill"),
                                                        "n_workers": 1}
    (tmp_path / "b.yaml").write_text(body + "cluster: {type: scheduler-file, scheduler_file: run/s.json,\n"
                                            "  security: {tls: {ca_file: ca.pem, cert: /abs/c.pem, key: k.pem}}}\n")
    c = load_config(tmp_path / "b.yaml").cluster
    assert c["scheduler_file"] == str(tmp_path / "run" / "s.json")
    assert c["security"]["tls"] == {"ca_file": str(tmp_path / "ca.pem"), "cert": "/abs/c.pem",
                                    "key": str(tmp_path / "k.pem")}
    (tmp_path / "c.yaml").write_text(body + "cluster: {type: slurm, cores: 2, memory: 4GB, local_directory: scratch}\n")
    assert load_config(tmp_path / "c.yaml").cluster["local_directory"] == "scratch"


def test_exponent_numbers_in_yaml_are_numbers(tmp_path):
    """`delta: 1e-6` (YAML 1.2 / JSON spelling) is a float in job files and schemas, not the string "1e-6";
    strings stay strings and non-numbers are not touched."""
    from privcube.core.yaml_io import load_yaml

    assert load_yaml("a: 1e-6\nb: -2E+3\nc: 1.5e-9\nd: 1e6x\ne: '1e-6'\nf: 3\ng: e5") == {
        "a": 1e-6, "b": -2000.0, "c": 1.5e-9, "d": "1e6x", "e": "1e-6", "f": 3, "g": "e5"}
    (tmp_path / "job.yaml").write_text(
        "data: {path: d.parquet, domain: {a: 3}}\nmechanism: residual-planner\nworkload: [{kway: 1}]\n"
        "privacy: {epsilon: 1, delta: 1e-6}\n")
    cfg = load_config(tmp_path / "job.yaml")
    assert cfg.budget.delta == 1e-6 and cfg.budget.epsilon == 1.0


def test_workload_built_in_python_is_accepted_in_a_config_mapping():
    """A workload from the Python helpers (here hybrid: prefix on a, identity elsewhere) can stand in the
    config's workload section; it used to fail with "workload must be a non-empty list of entries". The
    resolved config (config.yaml, resume fingerprint) holds its plain form."""
    import yaml

    from privcube.core.domain import Domain
    from privcube.core.workload import hybrid

    dom = Domain(("a", "b", "c"), (3, 4, 2))
    wl = hybrid(dom, [1, 2], ["a"])
    cfg = load_config(base(mechanism={"name": "querysmasher"}, workload=wl), need_data=False)
    assert cfg.workload == wl and len(cfg.workload) == 3 + 3
    assert cfg.workload.groups[0].query_types() == {"a": "prefix"}
    resolved = yaml.safe_load(yaml.safe_dump(cfg.resolved()))  # plain data, writable as config.yaml
    assert resolved["workload"][0] == {"attributes": ["a"], "queries": {"a": "prefix"}, "weight": 1.0}
    other = Domain(("a", "z"), (3, 2))
    with pytest.raises(WorkloadError, match="'z'"):
        load_config(base(workload=hybrid(other, [1], [])), need_data=False)
