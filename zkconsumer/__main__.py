"""``python -m zkconsumer`` and the ``zkconsumer`` console script; see :mod:`zkconsumer.cli`.

May import: cli.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .cli import run
from .cli.interrupt import InterruptPolicy, grace_from_environment


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``zkconsumer`` command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Without ``argv`` (the console script, ``python -m zkconsumer``) this process is the
    command, so Ctrl-C follows :mod:`zkconsumer.cli.interrupt`: the first ends it within
    a bound (``$ZKCONSUMER_INTERRUPT_GRACE_S``, default 10 s), a second at once. With
    ``argv`` (a caller running commands in its own process) signals are left alone.
    """
    if argv is not None:
        return run(argv)
    with InterruptPolicy(grace_from_environment()):
        return run(None)


def _console() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        # stdout's reader went away (``zkconsumer ... | head``): don't print a traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":
    _console()
