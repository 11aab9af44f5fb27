#!/usr/bin/env python3
"""Where a forward step's time goes, from an Nsight Systems kernel trace.

Input: the CSV of `nsys stats --report cuda_gpu_trace --format csv` for a run of `edgespec bench`
profiled with `--cuda-graph-trace=node` (every kernel of a replayed graph is its own row).

Kernels of one stream finish in launch order, so a step's time is the sum over its kernels of
end_i - end_{i-1}: each kernel's *added* time, the part of the step that would go if it took no
time at all while everything before it stayed. With programmatic dependent launch a kernel
starts (and prefetches) before its predecessor ends, so its added time can be far below its
duration; the gap between them is overlap bought by PDL.

The trace is cut into forwards at every embedding kernel (a forward's first kernel); forwards
with the same kernel sequence (names and grids) form a group. For the largest groups it prints
the median forward (first start to last end), then each kernel position's median duration and
added time, and the added time summed by kernel name.
"""
import csv
import re
import statistics
import sys
from collections import defaultdict


def short_name(name: str) -> str:
    name = re.sub(r"^void\s+", "", name).replace("(anonymous namespace)::", "")
    depth = 0
    for i, c in enumerate(name):  # cut the parameter list: the first "(" outside <...>
        depth += (c == "<") - (c == ">")
        if c == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\b[\w]*::", "", name)  # namespaces
    return name.replace("__nv_bfloat16", "bf16")[:90]


def read_kernels(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    kernels = []
    for r in rows:
        try:
            start = int(float(r["Start (ns)"]))
            dur = int(float(r["Duration (ns)"]))
        except (KeyError, ValueError):
            continue
        grid = "x".join(r.get(k, "") for k in ("GrdX", "GrdY", "GrdZ"))
        if grid == "xx" or not r.get("GrdX"):
            continue  # memcpy / memset rows
        kernels.append((start, dur, short_name(r["Name"]), grid))
    kernels.sort()
    return kernels


def split_forwards(kernels):
    forwards, current = [], []
    for k in kernels:
        if "embedding" in k[2] and current:
            forwards.append(current)
            current = []
        current.append(k)
    if current:
        forwards.append(current)
    return forwards


def report(path, groups_to_show=2):
    kernels = read_kernels(path)
    forwards = split_forwards(kernels)
    groups = defaultdict(list)
    for fw in forwards:
        groups[tuple((k[2], k[3]) for k in fw)].append(fw)
    print(f"# {path}: {len(kernels)} kernels, {len(forwards)} forwards, {len(groups)} kinds")
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    for signature, fws in ranked[:groups_to_show]:
        # Drop forwards whose kernels are not back to back (a host gap inside: not steady state).
        spans = [fw[-1][0] + fw[-1][1] - fw[0][0] for fw in fws]
        n = len(signature)
        durs = [[fw[i][1] for fw in fws] for i in range(n)]
        added = [[fw[0][1] if i == 0 else max(0, fw[i][0] + fw[i][1] - (fw[i - 1][0] + fw[i - 1][1]))
                  for fw in fws] for i in range(n)]
        med_span = statistics.median(spans) / 1e3
        print(f"\n## {len(fws)} forwards of {n} kernels: median span {med_span:.1f} us")
        by_name = defaultdict(lambda: [0.0, 0.0, 0])
        for i, (name, grid) in enumerate(signature):
            key = (name, grid)
            by_name[key][0] += statistics.median(added[i]) / 1e3
            by_name[key][1] += statistics.median(durs[i]) / 1e3
            by_name[key][2] += 1
        print(f"{'added us':>9} {'dur us':>8} {'n':>4} {'per: added':>10} {'dur':>7}  grid  kernel")
        total = 0.0
        for (name, grid), (a, d, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
            total += a
            print(f"{a:9.1f} {d:8.1f} {c:4d} {a / c:10.2f} {d / c:7.2f}  {grid}  {name}")
        print(f"{total:9.1f}  (sum of added = span - first kernel's start offset)")
        # The first layer's kernels, position by position (one layer repeats after it).
        print("first 12 kernels of the median forward (dur / added, us):")
        for i in range(min(12, n)):
            print(f"  {statistics.median(durs[i]) / 1e3:7.2f} {statistics.median(added[i]) / 1e3:7.2f}"
                  f"  {signature[i][1]}  {signature[i][0]}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        report(p)
