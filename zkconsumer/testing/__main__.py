"""``python -m zkconsumer.testing``: pre-fetch the Kafka distribution and check for java."""

import sys

from zkconsumer.testing.distribution import main

sys.exit(main())
