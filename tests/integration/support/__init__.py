"""What the integration tests share, one module per concern; import from the module, not from here.

- ``common``: unique names, consumer properties, waiting, draining streams, reading the group
  as Kafka does, members and a producer that keep going through faults, the CLI in-process.
- ``offsets``: both offset stores, and a test program as a child process (``ChildProcess``).
- ``switch``: the live-switch tests' recording members, the command and the referee.
- ``kerberos``: the kerberized cluster and its clients.
- ``compose``: ``docker-compose.yml``'s cluster, driven through the Docker CLI.
- ``cli_process``: the ``zkconsumer`` command as a separate process that Ctrl-C reaches.
- ``programs/``: programs the tests run by path as child processes (``python PROGRAMS / name``);
  each imports only ``zkconsumer`` and third-party packages, never this folder, so it runs from
  any working directory with this checkout's ``zkconsumer`` importable.
"""

from __future__ import annotations

from pathlib import Path

#: The folder of the child programs (``member.py``, ``ack_member.py``, ``heartbeat_member.py``,
#: ``modern_client.py``).
PROGRAMS = Path(__file__).resolve().parent / "programs"

#: The checkout's root: on a child program's ``PYTHONPATH``, it makes the checkout's ``zkconsumer``
#: the one imported, installed or not.
ROOT = Path(__file__).resolve().parents[3]
