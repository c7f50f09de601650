"""What one wake-up of a blocked thread costs on this machine, in C and in Python (issue 44).

``python -m benchmarks.wakeup_cost [--rate 1000] [--window 15] [--calls 0,30,90]``

At a live stream's rates a consumer's thread sleeps in the kernel between messages, and each
message wakes it. This measures that wake-up alone, with no Kafka around it: a sender process sends
one 100-byte UDP datagram every ``1/rate`` s to a receiver process, which blocks in ``recv`` and,
after each datagram, does nothing else (``c``: a loop compiled from C at run time with the
system's ``cc``; ``python``: a ``sock.recv`` loop) or makes N trivial Python calls
(``python+N``: a thread that wakes and runs a little Python, as a fetch round does). Each receiver
runs alone for ``--window`` seconds after a 2 s warm-up and reports its own CPU (``getrusage``:
user and system, µs per datagram) and context switches per datagram.

The difference between the rows is what a consumer pays per message at these rates for being woken
and for running Python once awake, before it does any work of its own. Hold
``/tmp/zkconsumer-cluster.lock`` while it runs (``flock``): a loaded machine's figures mean little.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import List, Tuple

SENDER = r"""
import socket, sys, time
port, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"x" * 100
start = time.monotonic()
for i in range(int(rate * seconds)):
    ahead = start + i / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
    sock.sendto(payload, ("127.0.0.1", port))
sock.sendto(b"", ("127.0.0.1", port))
"""

PY_RECEIVER = r"""
import resource, socket, sys, time
calls, warm = int(sys.argv[1]), float(sys.argv[2])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
def step(x):
    return x + 1
n, start, begin = 0, None, None
recv = sock.recv
while True:
    data = recv(2048)
    if not data:
        break
    for _ in range(calls):
        step(0)
    if start is None:
        start = time.monotonic() + warm
    elif begin is None:
        if time.monotonic() >= start:
            begin = resource.getrusage(resource.RUSAGE_SELF)
    else:
        n += 1
end = resource.getrusage(resource.RUSAGE_SELF)
print(n, end.ru_utime - begin.ru_utime, end.ru_stime - begin.ru_stime, end.ru_nvcsw - begin.ru_nvcsw,
      end.ru_nivcsw - begin.ru_nivcsw, flush=True)
"""

C_RECEIVER = r"""
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double warm = atof(argv[1]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {0}; socklen_t len = sizeof a;
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return 1;
    printf("%d\n", ntohs(a.sin_port)); fflush(stdout);
    char buf[2048]; long n = 0; double start = -1; int begun = 0; struct rusage b, e;
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) break;
        if (start < 0) start = now() + warm;
        else if (!begun) { if (now() >= start) { getrusage(RUSAGE_SELF, &b); begun = 1; } }
        else n++;
    }
    getrusage(RUSAGE_SELF, &e);
    printf("%ld %f %f %ld %ld\n", n, (e.ru_utime.tv_sec - b.ru_utime.tv_sec) + (e.ru_utime.tv_usec - b.ru_utime.tv_usec) / 1e6,
           (e.ru_stime.tv_sec - b.ru_stime.tv_sec) + (e.ru_stime.tv_usec - b.ru_stime.tv_usec) / 1e6,
           e.ru_nvcsw - b.ru_nvcsw, e.ru_nivcsw - b.ru_nivcsw);
    return 0;
}
"""

WARM_S = 2.0


def run_one(receiver: List[str], rate: int, window: float) -> Tuple[int, float, float, int, int]:
    """Start ``receiver`` (it prints its port, then its counts), feed it for ``window`` + warm-up seconds."""
    proc = subprocess.Popen(receiver, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        subprocess.run([sys.executable, "-c", SENDER, str(port), str(rate), str(window + WARM_S)], check=True)
        fields = proc.stdout.readline().split()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    n = int(fields[0])
    return n, float(fields[1]), float(fields[2]), int(fields[3]), int(fields[4])


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--calls", default="0,30,90", help="Python calls per wake-up, one row each")
    parser.add_argument("--rounds", type=int, default=1, help="rows repeated, alternated")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = os.path.join(tmp, "recv.c"), os.path.join(tmp, "recv")
        with open(source, "w", encoding="utf-8") as f:
            f.write(C_RECEIVER)
        subprocess.run(["cc", "-O2", "-o", binary, source], check=True)
        kinds = [("c", [binary, str(WARM_S)])]
        for calls in (int(c) for c in args.calls.split(",")):
            name = "python" if calls == 0 else f"python+{calls}"
            kinds.append((name, [sys.executable, "-c", PY_RECEIVER, str(calls), str(WARM_S)]))
        print(f"{args.rate} datagrams/s, {args.window:g} s per row; CPU in µs per datagram (wake-up)")
        print(f"{'receiver':<12} {'n':>7} {'CPU':>7} {'user':>7} {'system':>7} {'vol cs':>7} {'invol cs':>8}")
        for _ in range(args.rounds):
            for name, command in kinds:
                n, user, system, vol, invol = run_one(command, args.rate, args.window)
                n = max(n, 1)
                print(f"{name:<12} {n:>7} {1e6 * (user + system) / n:>7.1f} {1e6 * user / n:>7.1f} "
                      f"{1e6 * system / n:>7.1f} {vol / n:>7.2f} {invol / n:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
