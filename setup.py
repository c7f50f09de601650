import os
import sys

from setuptools import Extension, setup

# The C extensions are optional: if one cannot be compiled, the build goes on without it.
# zkconsumer.wire._speedups (_speedups.c, the module, and _speedups_*.c, one file per concern, sharing
# _speedups.h) accelerates decoding, iteration, socket reads and the Fetch request and response framing
# (pure Python otherwise);
# zkconsumer/zookeeper/_heartbeat.c (Linux) sends ZooKeeper pings without the GIL (otherwise
# kazoo pings, as often as Kafka's client: zkconsumer/zookeeper/heartbeat.py).
# ZKCONSUMER_REQUIRE_EXTENSIONS=1 (set by .ci/run) makes them required: a compile error then
# fails the install instead of leaving the tests of the C paths to skip.
required = os.environ.get("ZKCONSUMER_REQUIRE_EXTENSIONS", "") not in ("", "0")
wire = "zkconsumer/wire/"
speedups_sources = [wire + "_speedups.c"] + [f"{wire}_speedups_{concern}.c"
                                            for concern in ("crc", "scan", "block", "decode", "cursor", "recv", "fetch", "arrow")]
# One shared object of several files: only PyInit__speedups needs to be visible outside it.
hidden = [] if sys.platform == "win32" else ["-fvisibility=hidden"]
extensions = [Extension("zkconsumer.wire._speedups", speedups_sources, depends=[wire + "_speedups.h"],
                        extra_compile_args=hidden, optional=not required)]
if sys.platform.startswith("linux"):
    extensions.append(Extension("zkconsumer.zookeeper._heartbeat", ["zkconsumer/zookeeper/_heartbeat.c"],
                                optional=not required))
setup(ext_modules=extensions)
