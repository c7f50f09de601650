"""``python -m zkconsumer`` and the ``zkconsumer`` console script; see :mod:`zkconsumer.cli`."""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .cli import run


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``zkconsumer`` command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    return run(argv)


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
