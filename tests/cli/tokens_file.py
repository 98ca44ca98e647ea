#!/usr/bin/env python3
"""tokens_file.py OUT N VOCAB SEED — writes an llm.c token file (256 int32
header: magic 20240520, version 1, token count; then uint16 tokens) of N
tokens drawn uniformly from [0, VOCAB) by Python's random with SEED. A file
of B*T + 1 tokens holds exactly one batch of B windows of T: with [data]
shuffle = false every step reads that batch (core/train/data.h)."""
import random
import struct
import sys

out, n, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
random.seed(seed)
toks = [random.randrange(vocab) for _ in range(n)]
with open(out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    f.write(struct.pack("<%dH" % n, *toks))
