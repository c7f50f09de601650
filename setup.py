import os
import sys

from setuptools import Extension, setup

# The C extensions are optional: if one cannot be compiled, the build goes on without it.
# zkconsumer/wire/_speedups.c accelerates decoding and iteration (pure Python otherwise);
# zkconsumer/zookeeper/_heartbeat.c (Linux) sends ZooKeeper pings without the GIL (otherwise
# kazoo pings, as often as Kafka's client: zkconsumer/zookeeper/heartbeat.py).
# ZKCONSUMER_REQUIRE_EXTENSIONS=1 (set by .ci/run) makes them required: a compile error then
# fails the install instead of leaving the tests of the C paths to skip.
required = os.environ.get("ZKCONSUMER_REQUIRE_EXTENSIONS", "") not in ("", "0")
extensions = [Extension("zkconsumer.wire._speedups", ["zkconsumer/wire/_speedups.c"], optional=not required)]
if sys.platform.startswith("linux"):
    extensions.append(Extension("zkconsumer.zookeeper._heartbeat", ["zkconsumer/zookeeper/_heartbeat.c"],
                                optional=not required))
setup(ext_modules=extensions)
