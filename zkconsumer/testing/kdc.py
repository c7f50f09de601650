"""A real MIT Kerberos KDC on loopback, for ``LocalCluster(kerberos=True)`` (Debian's ``krb5-kdc``).

:class:`LocalKdc` creates, in a directory of its own, a realm's database
(``kdb5_util create``), a ``kdc.conf`` and a ``krb5.conf`` pointing at a ``krb5kdc``
that listens on a free loopback port (TCP only), and makes principals and keytabs
with ``kadmin.local``. Nothing outside the directory is read or written: every tool,
and every client that should use this realm, gets ``KRB5_CONFIG`` (and
``KRB5_KDC_PROFILE``) from :attr:`LocalKdc.environ`; JVMs get ``-Djava.security.krb5.conf``.

``krb5.conf`` turns host-name canonicalisation off (``dns_canonicalize_hostname = false``,
``rdns = false``): a service on ``localhost`` is ``service/localhost@REALM`` for MIT's
library and for Java alike, whatever the machine's DNS says.

Example: ``keytab = kdc.add_principal("app")``, ``kdc.kinit("app", keytab, ccache)`` (a ticket cache),
``kdc.stop_server(); kdc.start_server()`` ("the KDC is down" and back). Missing tools:
:class:`~zkconsumer.testing.errors.MissingDependencyError` naming the Debian packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from zkconsumer.testing import processes
from zkconsumer.testing.errors import ClusterStartError, MissingDependencyError
from zkconsumer.testing.ports import free_ports

__all__ = ["LocalKdc", "DEFAULT_REALM", "find_kdc_tools", "find_libfaketime", "jaas_section"]

DEFAULT_REALM = "ZKCONSUMER.TEST"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def find_kdc_tools() -> Dict[str, str]:
    """Paths of ``krb5kdc``, ``kdb5_util``, ``kadmin.local`` and ``kinit``; MissingDependencyError if absent."""
    found: Dict[str, str] = {}
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    for tool in _TOOLS:
        path = shutil.which(tool, path=search)
        if path is None:
            raise MissingDependencyError(
                f"{tool} not found: a kerberized LocalCluster needs MIT Kerberos's KDC and tools "
                "(Debian/Ubuntu: apt-get install krb5-kdc krb5-admin-server krb5-user)")
        found[tool] = path
    return found


def find_libfaketime() -> str:
    """The path of libfaketime (Debian's ``faketime`` package); MissingDependencyError if absent."""
    for path in sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1")) + [Path("/usr/lib/faketime/libfaketime.so.1")]:
        if path.is_file():
            return str(path)
    raise MissingDependencyError("libfaketime not found: a KDC with a skewed clock needs it "
                                 "(Debian/Ubuntu: apt-get install faketime)")


class LocalKdc:
    """An MIT KDC for realm ``realm`` with its files in ``directory`` (created; removed by the caller).

    ``ticket_lifetime`` (seconds) is the realm's ``max_life``: every ticket, including a
    keytab login's, expires that long after it is issued (short lifetimes test renewal).
    """

    def __init__(self, directory: Path, realm: str = DEFAULT_REALM, ticket_lifetime: int = 3600) -> None:
        self.directory = Path(directory)
        self.realm = realm
        self.ticket_lifetime = ticket_lifetime
        self.port = 0
        self._tools: Dict[str, str] = {}
        self._server: Optional[processes.JavaProcess] = None

    # ------------------------------------------------------------------ files

    @property
    def krb5_conf(self) -> Path:
        """The clients' configuration (``KRB5_CONFIG``, ``-Djava.security.krb5.conf``)."""
        return self.directory / "krb5.conf"

    @property
    def environ(self) -> Dict[str, str]:
        """Environment variables pointing MIT's tools and library at this realm."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.directory / "kdc.conf")}

    def keytab(self, principal: str) -> Path:
        """Where :meth:`add_principal` wrote ``principal``'s keytab."""
        return self.directory / (principal.split("@", 1)[0].replace("/", "_") + ".keytab")

    def qualified(self, principal: str) -> str:
        """``principal`` with this realm appended when it has none."""
        return principal if "@" in principal else f"{principal}@{self.realm}"

    def _write_configs(self) -> None:
        d, life = self.directory, self.ticket_lifetime
        (d / "kdc.conf").write_text(f"""[kdcdefaults]
 kdc_ports = {self.port}
 kdc_tcp_ports = {self.port}

[realms]
 {self.realm} = {{
  database_name = {d}/principal
  admin_keytab = FILE:{d}/kadm5.keytab
  acl_file = {d}/kadm5.acl
  key_stash_file = {d}/stash
  kdc_ports = {self.port}
  kdc_tcp_ports = {self.port}
  max_life = {life}s
  max_renewable_life = {life}s
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }}

[logging]
 kdc = FILE:{d}/kdc.log
""")
        (d / "kadm5.acl").write_text("")
        self.krb5_conf.write_text(f"""[libdefaults]
 default_realm = {self.realm}
 dns_lookup_realm = false
 dns_lookup_kdc = false
 dns_canonicalize_hostname = false
 rdns = false
 udp_preference_limit = 1
 ticket_lifetime = {life}s
 renew_lifetime = {life}s
 forwardable = true
 default_ccache_name = FILE:{d}/default.ccache

[realms]
 {self.realm} = {{
  kdc = 127.0.0.1:{self.port}
 }}

[domain_realm]
 localhost = {self.realm}
 127.0.0.1 = {self.realm}
""")

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> "LocalKdc":
        """Create the realm and start ``krb5kdc``; returns once it accepts connections."""
        self._tools = find_kdc_tools()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        self._write_configs()
        self._run([self._tools["kdb5_util"], "create", "-s", "-r", self.realm, "-P", "zkconsumer-master-key"])
        self.start_server(timeout)
        return self

    def start_server(self, timeout: float = 30.0, *, clock_offset: int = 0) -> None:
        """Start (or restart, after :meth:`stop_server`) the KDC on the same port and database.

        ``clock_offset`` (seconds, e.g. 3600) runs it with its clock that far ahead of this host's (behind if
        negative), through Debian's ``faketime`` (libfaketime): a KDC out of step with the servers, which
        refuse its tickets ("Clock skew too great"). MissingDependencyError when libfaketime is missing.
        """
        if self._server is not None and self._server.running():
            raise RuntimeError("the KDC is already running: stop_server() first")
        argv = [self._tools["krb5kdc"], "-n", "-r", self.realm, "-P", str(self.directory / "kdc.pid")]
        env = {**os.environ, **self.environ}
        if clock_offset:
            env.update(LD_PRELOAD=find_libfaketime(), FAKETIME=f"{clock_offset:+d}", DONT_FAKE_MONOTONIC="1")
        self._server = processes.JavaProcess("krb5kdc", argv, str(self.directory / "krb5kdc.out"),
                                             cwd=str(self.directory), env=env)
        self._server.start()
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if not self._server.running():
                raise ClusterStartError(f"krb5kdc exited (status {self._server.exit_code()}); "
                                        f"end of its log:\n{processes.tail(str(self.directory / 'kdc.log'))}")
            if time.monotonic() > deadline:
                raise ClusterStartError(f"krb5kdc did not listen on 127.0.0.1:{self.port} within {timeout:.0f}s")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        import socket

        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            return True
        except OSError:
            return False

    def stop_server(self) -> None:
        """Kill the KDC (its database stays): clients then cannot get tickets until :meth:`start_server`."""
        if self._server is not None:
            self._server.kill()

    def stop(self) -> None:
        """Stop the KDC (idempotent); the directory is left to its owner."""
        self.stop_server()

    def __enter__(self) -> "LocalKdc":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ principals

    def add_principal(self, principal: str) -> Path:
        """Create ``principal`` with a random key and export it to :meth:`keytab`; returns that path."""
        keytab = self.keytab(principal)
        self.kadmin(f"addprinc -randkey {self.qualified(principal)}")
        self.kadmin(f"ktadd -k {keytab} {self.qualified(principal)}")
        return keytab

    def kadmin(self, query: str) -> str:
        """Run one ``kadmin.local`` query; its output. ClusterStartError when it fails."""
        return self._run([self._tools["kadmin.local"], "-r", self.realm, "-q", query])

    def kinit(self, principal: str, keytab: Path, ccache: str, *, lifetime: Optional[str] = None) -> None:
        """Log ``principal`` in from ``keytab`` into the ticket cache ``ccache`` (``FILE:...``), for
        ``lifetime`` (kinit's ``-l``, e.g. ``"5s"``; the realm's ticket lifetime when None)."""
        lifetime_args = ["-l", lifetime] if lifetime else []
        self._run([self._tools["kinit"], "-k", "-t", str(keytab), *lifetime_args, "-c", ccache,
                   self.qualified(principal)])

    def _run(self, argv: Sequence[str]) -> str:
        result = subprocess.run(list(argv), env={**os.environ, **self.environ}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
        output = result.stdout.decode("utf-8", "replace")
        if result.returncode != 0:
            raise ClusterStartError(f"{' '.join(argv[:2])} failed (status {result.returncode}): {output.strip()}")
        return output


def jaas_section(name: str, principal: str, keytab: Path, *, client: bool = False) -> str:
    """A JAAS login section for Java's Krb5LoginModule logging ``principal`` in from ``keytab``."""
    options: List[str] = ["useKeyTab=true", "storeKey=true", "useTicketCache=false", f'keyTab="{keytab}"',
                          f'principal="{principal}"']
    if client:
        options.append("doNotPrompt=true")
    body = "\n  ".join(options)
    return f"{name} {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  {body};\n}};\n"
