#!/usr/bin/env python3
# bench/kazoo_rwlock.py: section 14b's anchor, Kazoo's ReadLock and WriteLock (Debian's
# python3-kazoo 2.8) on the ZooKeeper the bench started. Uncontended acquire()+release() cycles on
# one client for SECONDS each (after 5 warm-up cycles), one JSON line on stdout:
#   {"read_cycles_per_s": R, "write_cycles_per_s": W}
# Usage: kazoo_rwlock.py HOST:PORT PATH SECONDS
import json
import sys
import time

from kazoo.client import KazooClient


def rate(lock, seconds):
    for _ in range(5):
        lock.acquire()
        lock.release()
    cycles = 0
    start = time.monotonic()
    end = start + seconds
    now = start
    while now < end:
        lock.acquire()
        lock.release()
        cycles += 1
        now = time.monotonic()
    return cycles / (now - start)


def main():
    hosts, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=20)
    try:
        read = rate(client.ReadLock(path), seconds)
        write = rate(client.WriteLock(path), seconds)
    finally:
        client.stop()
        client.close()
    print(json.dumps({"read_cycles_per_s": read, "write_cycles_per_s": write}), flush=True)


if __name__ == "__main__":
    main()
