"""``python -m benchmarks.rebalance``: what ``scripts/bench_rebalance`` runs."""

import sys

from benchmarks.rebalance.join import main

sys.exit(main())
