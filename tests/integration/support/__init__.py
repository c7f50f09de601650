"""What the integration tests share, one module per concern (import each name from its module); this
package itself holds only where things are: the child programs, the checkout, its environment.

- ``common``: unique names, consumer properties, waiting, draining streams, reading the group
  as Kafka does, members and a producer that keep going through faults, the CLI in-process.
- ``offsets``: both offset stores, and a test program as a child process (``ChildProcess``).
- ``switch``: the live-switch tests' recording members, the command and the referee.
- ``kerberos``: the kerberized cluster and its clients.
- ``compose``: ``docker-compose.yml``'s cluster, driven through the Docker CLI.
- ``cli_process``: the ``zkconsumer`` command as a separate process that Ctrl-C reaches.
- ``programs/``: programs the tests run by path as child processes (``python PROGRAMS / name``);
  each imports only ``zkconsumer`` and third-party packages, never this folder, so it runs from
  any working directory; started with :func:`checkout_env`, it imports this checkout's ``zkconsumer``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

#: The folder of the child programs (``member.py``, ``ack_member.py``, ``heartbeat_member.py``; the modern
#: client member, shared with the benchmarks, is ``harness/modern_client.py``).
PROGRAMS = Path(__file__).resolve().parent / "programs"

#: The checkout's root (where ``zkconsumer/`` and ``harness/`` are).
ROOT = Path(__file__).resolve().parents[3]


def checkout_env(**extra: str) -> Dict[str, str]:
    """This process's environment plus ``extra``, with :data:`ROOT` first on ``PYTHONPATH``: a child
    program started with it imports this checkout's ``zkconsumer``, whatever is installed and
    whatever its working directory."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **extra, "PYTHONPATH": path}
