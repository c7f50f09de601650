"""``python -m benchmarks.latency``: see :mod:`benchmarks.latency.run`."""

import sys

from .run import main

sys.exit(main())
