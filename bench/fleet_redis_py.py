"""bench/fleet_redis_py.py: the redis-py anchor of redlock-bench's section 12 (fleet).

N processes (os.fork), each with its own redis.Redis client and redis-py Lock (its default
settings: sleep 0.1 s between attempts), loop acquire / hold / release on one key for
WARM_UP + SECONDS.
acquire() is called with blocking_timeout = the time left in the window, like
try_lock_until(end). Once every process is connected, this one prints
  start <epoch ms>
(the window opens then, in every process, WARM_UP seconds after the loops start), and each
process prints, when it is over,
  acq <acquisitions inside the window> <longest acquire() call ending inside it, in ms>
Usage: python3 fleet_redis_py.py PORT KEY N SECONDS HOLD_MS WARM_UP
"""
import ctypes
import os
import select
import sys
import time

import redis

RECORD = 24  # bytes of one start time on the go pipe (one atomic write and read each)


def worker(port, key, seconds, hold_ms, warm_up, ready_w, go_r):
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: never outlive the harness
    client = redis.Redis(host="127.0.0.1", port=port)
    client.ping()
    lock = client.lock(key, timeout=10)
    os.write(ready_w, b"r")
    start = float(os.read(go_r, RECORD).decode()) / 1000.0
    time.sleep(max(0.0, start - warm_up - time.time()))
    end = start + seconds
    acquisitions = 0
    max_wait = 0.0
    while time.time() < end:
        t0 = time.monotonic()
        got = lock.acquire(blocking=True, blocking_timeout=max(0.0, end - time.time()))
        if time.time() >= start:
            max_wait = max(max_wait, time.monotonic() - t0)
        if not got:
            continue
        if start <= time.time() < end:
            acquisitions += 1
        time.sleep(hold_ms / 1000.0)
        lock.release()
    sys.stdout.write("acq %d %.3f\n" % (acquisitions, max_wait * 1000.0))
    sys.stdout.flush()


def main():
    port, key, n, seconds, hold_ms, warm_up = sys.argv[1:7]
    n = int(n)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(int(port), key, float(seconds), float(hold_ms), float(warm_up), ready_w,
                       go_r)
            except Exception as e:  # reported, and the process still exits
                sys.stderr.write("fleet_redis_py worker: %s\n" % e)
                code = 1
            os._exit(code)
        children.append(pid)
    got = 0
    deadline = time.monotonic() + 60  # a child that died never says it is ready
    while got < n and select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))[0]:
        got += len(os.read(ready_r, n - got))
    start_ms = int(time.time() * 1000) + 200 + int(float(warm_up) * 1000)
    sys.stdout.write("start %d\n" % start_ms)
    sys.stdout.flush()
    for _ in range(n):
        os.write(go_w, ("%d" % start_ms).ljust(RECORD).encode())
    for pid in children:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
