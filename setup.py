from setuptools import Extension, setup

# The C accelerator (zkconsumer/wire/_speedups.c) is optional: if it cannot be compiled,
# the build goes on without it and zkconsumer runs in pure Python.
setup(ext_modules=[Extension("zkconsumer.wire._speedups", ["zkconsumer/wire/_speedups.c"], optional=True)])
