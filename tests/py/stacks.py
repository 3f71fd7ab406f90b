"""Workload of the stack-loss test: JSON encoding and decoding, regular expressions and file
system calls, which give a new stack at almost every sample (the innermost address differs
each time) and some kernel stacks. Usage: stacks.py ROUNDS."""

import json
import os
import random
import re
import sys

random.seed(1)
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
DOC = [
    {
        "id": i,
        "name": " ".join(random.choice(WORDS) for _ in range(8)),
        "vals": [random.random() for _ in range(20)],
        "tags": {w: i % 7 for w in WORDS},
    }
    for i in range(2000)
]
NAME = re.compile(r'"name": "([a-z ]+)"')
FLOAT = re.compile(r"\d+\.\d{3}")


def encode():
    return json.dumps(DOC, sort_keys=True, indent=1)


def decode(text):
    return json.loads(text)


def search(text):
    return len(NAME.findall(text)) + len(FLOAT.findall(text[:200000]))


def walk():
    n = 0
    for root in ("/usr/lib", "/usr/share"):
        for entry in os.scandir(root):
            n += entry.stat(follow_symlinks=False).st_size & 1
    return n


total = 0
for _ in range(int(sys.argv[1])):
    text = encode()
    total += len(decode(text)) + search(text) + walk()
print(total)
