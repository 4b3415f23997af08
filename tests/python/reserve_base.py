#!/usr/bin/env python3
"""A base port for a suite's clusters, free now and reserved the way
kd_test_base_port reserves one (an abstract socket named for it), so that
suites running side by side (ctest -j) never take the same.

    base=$(python3 tests/python/reserve_base.py $$)   # a bash suite

prints the base and keeps the reservation, in a process of its own, until
the process whose pid it was given has ended.  conftest.py imports
free_base_port, which holds the reservation until release_base gives it
back (a Cluster does when it is killed) or the Python process ends."""
import os
import random
import socket
import sys
import time

HELD = {}


def free_base_port(wait=30.0):
    """A random one of the 60 bases of 20000-31999 whose service, shard
    and Prometheus ports are free now and that no other suite holds.  When
    all are taken, waits for one up to wait seconds (suites end every few
    seconds), then raises."""
    deadline = time.monotonic() + wait
    while True:
        first = random.randrange(60)
        for i in range(60):
            base = 20000 + (first + i * 37) % 60 * 200
            ports = [base, base + 1, base + 2, base + 3, base + 50, base + 100, base + 101]
            socks = []
            try:
                for p in ports:
                    s = socket.socket()
                    s.bind(("127.0.0.1", p))
                    socks.append(s)
                hold = socket.socket(socket.AF_UNIX)
                hold.bind(f"\0kudus-test-base-{base}")
                HELD[base] = hold
                return base
            except OSError:
                pass
            finally:
                for s in socks:
                    s.close()
        if time.monotonic() > deadline:
            raise RuntimeError(f"no free base port among the 60 of 20000-31999 after {wait:.0f} s")
        time.sleep(0.2)


def release_base(base):
    """Give back a base free_base_port reserved, once its cluster is gone."""
    hold = HELD.pop(base, None)
    if hold is not None:
        hold.close()


def main(owner):
    base = free_base_port()
    print(base, flush=True)
    # The child keeps the reservation; the caller's $(...) ends with us.
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(1)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: reserve_base.py OWNER_PID")
    main(int(sys.argv[1]))
