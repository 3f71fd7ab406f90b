"""Workload of the stacks test of a slow first read: maps FILES with execute permission (so
that a profiler unwinding these processes loads every file's unwind information), then runs
CHILDREN processes that each spin for SECS seconds of CPU time, and waits for them.

Usage: mapped_files.py SECS CHILDREN FILE...
"""

import mmap
import os
import sys
import time


def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def main():
    seconds, children, files = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    mapped = []
    for path in files:
        with open(path, "rb") as f:
            mapped.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            spin(seconds)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


main()
