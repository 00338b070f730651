#!/usr/bin/env python3
# A model of one entity kind's throughput on N worker threads with lanes (docs/PERFORMANCE.md,
# "Lanes at 16 and 64 cores"). Arguments: c_k and o in microseconds, measured on two cores:
#   c_k : CPU the kind's one task spends per command (routing, lifecycle, completion): serial
#   o   : the rest of the per-command overhead, spread over the workers (producers' tells,
#         the lanes' side of the hand-over)
# w, the handler's own work, is 1 / (plain tasks' rate per worker) at 5, 20 and 50 µs.
# X(N) = min(N / (w + c_k + o), 1 / c_k): the workers' CPU, or the kind's one task, runs out.
# Plain(N) = N / w.
import sys

c_k = float(sys.argv[1]); o = float(sys.argv[2])
print("| work per command | workers | modelled commands/s | plain tasks/s | ratio | limited by |")
print("|---|---|---|---|---|---|")
for w_nominal, w in [(5, 5.23), (20, 20.4), (50, 50.7)]:
    for n in [2, 4, 8, 16, 32, 64]:
        cpu = n / (w + c_k + o) * 1e6
        task = 1 / c_k * 1e6
        x = min(cpu, task)
        plain = n / w * 1e6
        print(f"| {w_nominal} µs | {n} | {x:,.0f} | {plain:,.0f} | {x/plain:.2f} | {'the kind task' if task < cpu else 'the cores'} |")
