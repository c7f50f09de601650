"""Benchmarks, fault drills and the harnesses they and the tests share (not part of the shipped package), driven by scripts/."""
