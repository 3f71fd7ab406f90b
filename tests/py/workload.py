"""Workload for cg-trace's Python tests: functions that burn CPU in known proportions.

work_b does twice work_a's work per call, Worker.method the same as work_a; all three run the
same loop, so their sampled energies should be about 1 : 2 : 1. Usage: workload.py [ROUNDS].
"""
import sys


def spin(n):
    x = 1
    for i in range(n):
        x = (x * 1103515245 + i) & 0xFFFFFFFF
    return x


def work_a(n):
    return spin(n)


def work_b(n):
    return spin(2 * n)


class Worker:
    def method(self, n):
        return spin(n)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    worker = Worker()
    total = 0
    for _ in range(rounds):
        total += work_a(20_000)
        total += work_b(20_000)
        total += worker.method(20_000)
    print("rounds", rounds, "total", total % 1000)


if __name__ == "__main__":
    main()
