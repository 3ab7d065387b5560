"""Transport security: TLS spec parsing, plain-text address refusal, and a job on a TLS LocalCluster."""
from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, Security

from privcube.core.errors import ConfigError
from privcube.graphs.cluster.security import (
    allow_insecure_from_spec,
    check_address_security,
    client_kwargs,
    is_loopback_host,
    local_cluster_kwargs,
    security_from_spec,
)


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A self-signed CA/cert/key written to files (the material Security.temporary() holds in memory)."""
    tmp = tmp_path_factory.mktemp("tls")
    sec = Security.temporary()
    paths = {"ca_file": tmp / "ca.pem", "cert": tmp / "node.pem", "key": tmp / "node.key"}
    paths["ca_file"].write_text(sec.tls_ca_file)
    paths["cert"].write_text(sec.tls_worker_cert)
    paths["key"].write_text(sec.tls_worker_key)
    return {k: str(v) for k, v in paths.items()}


def _run_sum(security: Security) -> None:
    """Start a 1-worker TLS LocalCluster, check every address is tls://, and compute a dask sum."""
    kw = local_cluster_kwargs(security)
    assert kw == {"protocol": "tls://", "security": security, "host": "127.0.0.1"}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0", **kw) as cluster, \
            Client(cluster, **client_kwargs(security)) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")  # TLS, and loopback only
        assert check_address_security(client.scheduler.address, security, False) == client.scheduler.address
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 1 and all(w.startswith("tls://") for w in workers)
        x = da.arange(10_000, chunks=1_000)
        assert int(x.sum().compute()) == 10_000 * 9_999 // 2
        assert client.submit(np.add, 2, 3).result() == 5


def test_tls_local_cluster_auto() -> None:
    sec = security_from_spec("auto")
    assert isinstance(sec, Security) and sec.require_encryption
    _run_sum(sec)


def test_tls_local_cluster_from_files(pem_files: dict[str, str]) -> None:
    sec = security_from_spec({"tls": pem_files})
    assert isinstance(sec, Security) and sec.require_encryption
    assert sec.tls_ca_file == pem_files["ca_file"] and sec.tls_scheduler_key == pem_files["key"]
    _run_sum(sec)


def test_security_spec_validation(pem_files: dict[str, str], tmp_path: Path) -> None:
    assert security_from_spec(None) is None
    assert security_from_spec({}) is None
    assert security_from_spec({"tls": None, "allow_insecure": True}) is None
    assert isinstance(security_from_spec({"tls": "auto"}), Security)
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match=r"security\.tls\.ca_file.*nope\.pem"):
        security_from_spec({"tls": {**pem_files, "ca_file": missing}})
    with pytest.raises(ConfigError, match=r"security\.tls\.key.*nope\.pem"):
        security_from_spec({"tls": {**pem_files, "key": missing}})
    with pytest.raises(ConfigError, match="needs key 'cert'"):
        security_from_spec({"tls": {"ca_file": pem_files["ca_file"], "key": pem_files["key"]}})
    with pytest.raises(ConfigError, match="unknown key"):
        security_from_spec({"tls": {**pem_files, "password": "x"}})
    with pytest.raises(ConfigError, match="unknown key"):
        security_from_spec({"tsl": "auto"})
    with pytest.raises(ConfigError, match="security.tls must be"):
        security_from_spec({"tls": "yes please"})
    with pytest.raises(ConfigError, match="allow_insecure"):
        security_from_spec({"allow_insecure": "yes"})
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="cert/key"):
        security_from_spec({"tls": {**pem_files, "cert": str(junk)}})
    assert allow_insecure_from_spec({"allow_insecure": True}) is True
    assert allow_insecure_from_spec("auto") is False


@pytest.mark.parametrize("address", ["tcp://10.1.2.3:8786", "10.1.2.3:8786", "tcp://scheduler.example.org:8786",
                                     "tcp://[2001:db8::1]:8786", "tcp://:8786", "tcp://0.0.0.0:8786"])
def test_plain_tcp_off_loopback_refused_unless_allowed(address: str) -> None:
    with pytest.raises(ConfigError, match="allow_insecure"):
        check_address_security(address, None, False)
    assert check_address_security(address, None, True).startswith("tcp://")


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "127.5.6.7:1", "localhost:8786", "tcp://[::1]:8786",
                                     "inproc://host/1/2"])
def test_loopback_and_inproc_accepted(address: str) -> None:
    assert "://" in check_address_security(address, None, False)


def test_tls_addresses_need_security() -> None:
    sec = Security.temporary()
    with pytest.raises(ConfigError, match="no security.tls"):
        check_address_security("tls://10.1.2.3:8786", None, False)
    assert check_address_security("tls://10.1.2.3:8786", sec, False) == "tls://10.1.2.3:8786"
    with pytest.raises(ConfigError, match="use tls://127.0.0.1:8786"):
        check_address_security("tcp://127.0.0.1:8786", sec, True)
    with pytest.raises(ConfigError, match="address"):
        check_address_security("", None, False)
    assert local_cluster_kwargs(None) == {"host": "127.0.0.1"} and client_kwargs(None) == {}
    assert local_cluster_kwargs(None, loopback=False) == {}


def test_is_loopback_host_literal_only() -> None:
    assert is_loopback_host("127.0.0.1") and is_loopback_host("127.255.0.9") and is_loopback_host("::1")
    assert is_loopback_host("[::1]") and is_loopback_host("LOCALHOST")
    assert not is_loopback_host("128.0.0.1") and not is_loopback_host("localhost.example.com")
    assert not is_loopback_host("") and not is_loopback_host("::")


def test_tls_local_cluster_through_resolve_cluster_counts_marginals():
    """A job on a TLS LocalCluster (security: {tls: auto}) completes and equals pandas counts."""
    import pandas as pd
    import dask.dataframe as dd

    from privcube.core.domain import Domain
    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.graphs.marginals import compute_marginals

    rng = np.random.default_rng(3)
    pdf = pd.DataFrame({"a": rng.integers(0, 3, 500), "b": rng.integers(0, 4, 500)})
    dom = Domain.from_mapping({"a": 3, "b": 4})
    spec = {"type": "local", "n_workers": 1, "processes": False, "security": {"tls": "auto"}}
    with resolve_cluster(spec) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1")
        mu = compute_marginals(dd.from_pandas(pdf, npartitions=3), dom, [("a", "b")], client=client)[("a", "b")]
    truth = pdf.groupby(["a", "b"]).size().unstack(fill_value=0).reindex(index=range(3), columns=range(4), fill_value=0)
    assert np.array_equal(mu, truth.to_numpy())


def test_tls_auto_is_refused_for_schedulers_privcube_does_not_start(tmp_path: Path) -> None:
    from privcube.graphs.cluster.handle import resolve_cluster

    with pytest.raises(ConfigError, match=r"'auto'.*\(address\).*ca_file"):
        resolve_cluster({"type": "address", "address": "tls://10.0.0.1:8786", "security": {"tls": "auto"}})
    with pytest.raises(ConfigError, match=r"'auto'.*\(scheduler-file\)"):
        resolve_cluster({"type": "local", "security": "auto"}, scheduler_file=str(tmp_path / "s.json"))
    assert resolve_cluster({"type": "local", "security": "auto"}).security is not None


def test_full_job_on_a_tls_local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`privcube run` on a LocalCluster of worker processes with `security: {tls: auto}`: every link is TLS
    and the job completes with the same seeded answers as on threads."""
    import json

    import pandas as pd
    import yaml

    from privcube import api
    from privcube.graphs.cluster import handle as cluster_mod

    rng = np.random.default_rng(12)
    (tmp_path / "data").mkdir()
    pd.DataFrame({"a": rng.integers(0, 3, 3000), "b": rng.integers(0, 4, 3000)}).to_parquet(
        tmp_path / "data" / "p.parquet", index=False)
    cfg = {"data": {"path": "data", "domain": {"a": 3, "b": 4}}, "mechanism": {"name": "residual-planner"},
           "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6},
           "cluster": {"type": "local", "n_workers": 1, "memory_limit": "1GiB", "security": {"tls": "auto"}}}
    (tmp_path / "tls.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "threads.yaml").write_text(yaml.safe_dump({**cfg, "cluster": {"type": "threads"}}))
    seen: list[tuple[str, list[str]]] = []
    real_open = cluster_mod.ClusterHandle._open

    def recording(self):  # noqa: ANN001, ANN202
        client = real_open(self)
        seen.append((client.scheduler.address, list(client.scheduler_info()["workers"])))
        return client

    monkeypatch.setattr(cluster_mod.ClusterHandle, "_open", recording)
    tls = api.run(tmp_path / "tls.yaml", tmp_path / "run-tls", seed=3, quiet=True)
    monkeypatch.undo()
    ref = api.run(tmp_path / "threads.yaml", tmp_path / "run-threads", seed=3, quiet=True)
    ((address, workers),) = seen
    assert address.startswith("tls://127.0.0.1:") and workers and all(w.startswith("tls://127.0.0.1:") for w in workers)
    assert (tls.out_dir / ".complete").exists()
    index = json.loads((tls.out_dir / "answers" / "index.json").read_text())
    for g in index["groups"]:
        a = pd.read_parquet(tls.out_dir / "answers" / g["file"])
        b = pd.read_parquet(ref.out_dir / "answers" / g["file"])
        assert np.allclose(a["estimate"], b["estimate"]) and np.allclose(a["variance"], b["variance"])
