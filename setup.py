import sys

from setuptools import Extension, setup

# The C extensions are optional: if one cannot be compiled, the build goes on without it.
# zkconsumer/wire/_speedups.c accelerates decoding and iteration (pure Python otherwise);
# zkconsumer/zookeeper/_heartbeat.c (Linux) sends ZooKeeper pings without the GIL (otherwise
# kazoo pings, as often as Kafka's client: zkconsumer/zookeeper/heartbeat.py).
extensions = [Extension("zkconsumer.wire._speedups", ["zkconsumer/wire/_speedups.c"], optional=True)]
if sys.platform.startswith("linux"):
    extensions.append(Extension("zkconsumer.zookeeper._heartbeat", ["zkconsumer/zookeeper/_heartbeat.c"],
                                optional=True))
setup(ext_modules=extensions)
