"""LocalCluster(kerberos=...) without starting anything: the missing KDC's error, options, the KDC's files.

The kerberized cluster itself runs in tests/integration/test_kerberos*.py and the Kerberos page's example.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zkconsumer.testing import KerberosOptions, LocalCluster, LocalClusterError, MissingDependencyError
from zkconsumer.testing import kdc as kdc_module
from zkconsumer.testing.kdc import LocalKdc


def test_a_missing_kdc_names_the_debian_packages_before_anything_starts(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(kdc_module, "_SBIN", ())
    cluster = LocalCluster(brokers=1, kerberos=True)
    with pytest.raises(MissingDependencyError, match="apt-get install krb5-kdc krb5-admin-server krb5-user"):
        cluster.start()
    with pytest.raises(LocalClusterError, match="stopped"):
        cluster.start()


def test_kerberos_options() -> None:
    assert LocalCluster(kerberos=True)._kerberos == KerberosOptions(ticket_lifetime=3600, principals=())
    assert LocalCluster(kerberos=KerberosOptions(ticket_lifetime=60))._kerberos == KerberosOptions(60)
    assert LocalCluster()._kerberos is None and LocalCluster(kerberos=False)._kerberos is None
    with pytest.raises(LocalClusterError, match="not running"):
        LocalCluster(kerberos=True).kerberos_consumer_properties()


def test_the_realm_files_point_only_at_the_kdc_directory(tmp_path: Path) -> None:
    kdc = LocalKdc(tmp_path, ticket_lifetime=120)
    kdc.port = 12345
    kdc._write_configs()
    krb5 = kdc.krb5_conf.read_text()
    assert "default_realm = ZKCONSUMER.TEST" in krb5 and "kdc = 127.0.0.1:12345" in krb5
    assert "ticket_lifetime = 120s" in krb5 and "dns_canonicalize_hostname = false" in krb5
    assert f"database_name = {tmp_path}/principal" in (tmp_path / "kdc.conf").read_text()
    assert kdc.environ == {"KRB5_CONFIG": str(tmp_path / "krb5.conf"), "KRB5_KDC_PROFILE": str(tmp_path / "kdc.conf")}
    assert kdc.keytab("kafka/localhost") == tmp_path / "kafka_localhost.keytab"
    assert kdc.qualified("zkclient") == "zkclient@ZKCONSUMER.TEST"
