"""The stamp, the per-message record every latency worker keeps, and the summary it prints.

A stamp is the producer's ``time.time_ns() // 1000`` at send, packed big-endian into the
first 8 bytes of the value. A worker keeps the latency of each message *stamped* inside the
measured window ``[t0, t1)`` (the same messages for every consumer, whatever its start-up
took), and, with a trace file, ``(partition, stamp, delivered)`` per message stamped at or
after ``t0`` (for the rebalance gaps). Percentiles are nearest-rank over the window's latencies.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

STAMP = struct.Struct(">q")
VALUE_SIZE = 100


def now_us() -> int:
    """The wall clock in microseconds since the epoch (the stamp's clock)."""
    return time.time_ns() // 1000


def stamped_value(stamp: int, size: int = VALUE_SIZE) -> bytes:
    """A ``size``-byte value whose first 8 bytes are ``stamp``."""
    return STAMP.pack(stamp) + bytes(size - STAMP.size)


def worker_arguments(description: str) -> argparse.ArgumentParser:
    """The options every worker takes (the orchestrator passes the same window to all)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--window", required=True, help="file the orchestrator writes once all are ready")
    parser.add_argument("--setting", choices=("defaults", "tuned"), default="defaults")
    parser.add_argument("--trace", default="", help="write (partition, stamp, delivered) big-endian int64 triples here")
    parser.add_argument("--group", default="", help="the group to join (default: a new one)")
    parser.add_argument("--prop", action="append", default=[], help="an extra consumer property name=value")
    return parser


class CpuWindow(threading.Thread):
    """Samples this process's CPU time (all threads) at wall-clock ``t0`` and ``t1`` (microseconds).

    ``counters``: also sampled at both (e.g. fetch requests so far); :meth:`counted` gives their differences.
    """

    def __init__(self, t0: int, t1: int, counters: Optional[Callable[[], Dict[str, int]]] = None) -> None:
        super().__init__(name="cpu-window", daemon=True)
        self.t0, self.t1 = t0, t1
        self.samples: List[float] = []
        self.counts: List[Dict[str, int]] = []
        self._counters = counters
        self._stop_event = threading.Event()

    def run(self) -> None:
        for at in (self.t0, self.t1):
            if self._stop_event.wait(max(0.0, (at - now_us()) / 1e6)):
                return
            self.samples.append(time.process_time())
            if self._counters is not None:
                self.counts.append(self._counters())

    def seconds(self) -> Optional[float]:
        """CPU seconds spent between t0 and t1, or ``None`` if the window was not reached."""
        return self.samples[1] - self.samples[0] if len(self.samples) == 2 else None

    def counted(self) -> Dict[str, int]:
        """How much each counter grew between t0 and t1 (empty without counters or a whole window)."""
        if len(self.counts) != 2:
            return {}
        return {k: v - self.counts[0].get(k, 0) for k, v in self.counts[1].items()}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


class Recorder:
    """Latencies (us) of the window's messages, and the optional trace; ``add`` is the per-message path."""

    def __init__(self, t0: int, t1: int, trace: bool, counters: Optional[Callable[[], Dict[str, int]]] = None) -> None:
        self.t0, self.t1 = t0, t1
        self.latencies = array("q")
        self.trace: Optional[array] = array("q") if trace else None
        self.cpu = CpuWindow(t0, t1, counters)
        self.cpu.start()

    def add(self, partition: int, stamp: int, delivered: int) -> None:
        if self.t0 <= stamp:
            if stamp < self.t1:
                self.latencies.append(delivered - stamp)
            if self.trace is not None:
                self.trace.extend((partition, stamp, delivered))

    def add_many(self, partition: int, stamps: Any, delivered: int) -> None:
        """``stamps``: a numpy int64 array, all delivered at ``delivered`` (one batch)."""
        import numpy as np

        inside = stamps[(stamps >= self.t0) & (stamps < self.t1)]
        if len(inside):
            self.latencies.frombytes((delivered - inside).astype(np.int64).tobytes())
        if self.trace is not None:
            later = stamps[stamps >= self.t0]
            for stamp in later.tolist():
                self.trace.extend((partition, stamp, delivered))

    def finish(self, kind: str, setting: str, trace_path: str, **extra: Any) -> Dict[str, Any]:
        """Stop the CPU sampler, write the trace, return the summary (also printed as the last stdout line)."""
        self.cpu.stop()
        if self.trace is not None and trace_path:
            if sys.byteorder == "little":
                self.trace.byteswap()  # big-endian, as the Java worker writes it
            with open(trace_path, "wb") as out:
                self.trace.tofile(out)
        summary = summarize(kind, setting, self.latencies, self.cpu.seconds(), **self.cpu.counted(), **extra)
        print(json.dumps(summary), flush=True)
        return summary


def percentile(ordered: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending sequence (``fraction`` in (0, 1])."""
    rank = max(1, -(-int(round(fraction * 1_000_000)) * len(ordered) // 1_000_000))
    return ordered[rank - 1]


def summarize(kind: str, setting: str, latencies: "array[int]", cpu: Optional[float], **extra: Any) -> Dict[str, Any]:
    """The worker's JSON summary: count, p50/p99/p99.9/max in ms, window CPU seconds and per million."""
    import numpy as np

    ordered = np.sort(np.frombuffer(latencies, dtype=np.int64)) if len(latencies) else np.zeros(0, np.int64)
    n = len(ordered)
    result: Dict[str, Any] = {"kind": kind, "setting": setting, "count": n, "cpu_s": cpu, **extra}
    for name, fraction in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0)):
        result[f"{name}_ms"] = round(int(percentile(ordered, fraction)) / 1000.0, 3) if n else None
    result["cpu_s_per_m"] = round(cpu / n * 1e6, 2) if cpu is not None and n else None
    return result


def ready(window_file: str, timeout: float = 300.0) -> Tuple[int, int, int]:
    """Tell the orchestrator this worker is reading (READY on stderr), then wait for the window.

    Returns ``(t0, t1, deadline)``, microseconds since the epoch, from ``window_file``
    (written once every worker is ready, before the producer starts).
    """
    sys.stderr.write("READY\n")
    sys.stderr.flush()
    path = Path(window_file)
    limit = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > limit:
            raise SystemExit(f"no window in {window_file} after {timeout:.0f} s")
        time.sleep(0.05)
    t0, t1, deadline = (int(x) for x in path.read_text().split())
    return t0, t1, deadline
