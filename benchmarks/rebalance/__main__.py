"""``python -m benchmarks.rebalance``: what ``scripts/bench-rebalance`` runs."""

import sys

from benchmarks.rebalance.join import main

sys.exit(main())
