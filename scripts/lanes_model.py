#!/usr/bin/env python3
# A model of one entity kind's throughput on N worker threads with lanes (docs/PERFORMANCE-HISTORY.md,
# "Lanes at 16 and 64 cores: a model, and the plan").
#
# Measured on two workers (docs/PERFORMANCE-HISTORY.md, "After the lanes, second cut"), per work size:
# the plain tasks' rate and the kind's rate. From them, per command:
#   w      = 2 / plain rate: the handler's own work, as plain tasks do it;
#   total  = 2 / sharded rate - w: everything sharding adds;
# and, given on the command line (from a profile of the 2-worker run):
#   c_k    : the part of `total` spent in the kind's one task (routing, the lifecycle, staging
#            for a lane, completing), which is serial: one kind on one node has one such task.
# The rest of `total` is spread over the workers. On N workers the kind handles
#   X(N) = min(N / (w + total), 1 / c_k)
# commands a second: the workers' CPU runs out, or the kind's one task does. Plain(N) = N / w.
#
# Usage: scripts/lanes_model.py C_K_MICROSECONDS
import sys

MEASURED = [  # work µs, plain tasks/s and sharded/s on 2 workers (medians of five runs)
    (5, 378_077, 336_282),
    (20, 97_114, 90_791),
    (50, 39_189, 38_349),
]

c_k = float(sys.argv[1]) * 1e-6
print("| work per command | workers | modelled commands/s | plain tasks/s | ratio | limited by |")
print("|---|---|---|---|---|---|")
for work_us, plain2, sharded2 in MEASURED:
    w = 2 / plain2
    total = 2 / sharded2 - w
    for n in [2, 4, 8, 16, 32, 64]:
        by_cores = n / (w + total)
        by_task = 1 / c_k
        x = min(by_cores, by_task)
        plain = n / w
        limit = "the kind's task" if by_task < by_cores else "the cores"
        print(f"| {work_us} µs | {n} | {x:,.0f} | {plain:,.0f} | {x / plain:.2f} | {limit} |")
