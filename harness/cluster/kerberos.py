"""The kerberized cluster of this project's own suite: ``ProjectCluster(kerberos=True)``.

Kerberos itself (the KDC, principals and keytabs, ZooKeeper's SASL, the brokers'
SASL_PLAINTEXT listeners) is :class:`zkconsumer.testing.LocalCluster`'s ``kerberos=``
option (:mod:`zkconsumer.testing.kerberos`), which users run too; with ProjectCluster's
``ssl=`` as well, the SSL port is a ``SASL_SSL`` listener. Example::

    with kerberized_cluster(brokers=1) as cluster:   # KRB5_CONFIG set for the duration
        props = {**consumer_props, **cluster.kerberos_consumer_properties()}
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from zkconsumer.testing.kdc import find_kdc_tools
from zkconsumer.testing.kerberos import CLIENT, OTHER_CLIENT, KerberizedCluster, KerberosOptions, realm_environment

__all__ = ["CLIENT", "OTHER_CLIENT", "KerberizedCluster", "KerberosOptions", "kerberized_cluster", "realm_environment"]


@contextlib.contextmanager
def kerberized_cluster(**options: Any) -> Iterator[Any]:
    """A started ``ProjectCluster(kerberos=..., **options)`` (``kerberos=True`` unless given) with this
    process pointed at its realm (:func:`realm_environment`); stopped, and the environment restored, on exit.

    Raises :class:`~zkconsumer.testing.errors.MissingDependencyError` (naming the Debian packages)
    before starting anything when MIT's KDC tools are missing.
    """
    from . import ProjectCluster  # the package imports this module

    find_kdc_tools()
    options.setdefault("kerberos", True)
    with ProjectCluster(**options) as cluster, realm_environment(cluster.kdc):
        yield cluster
