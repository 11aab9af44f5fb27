#!/usr/bin/env python3
"""Sums an `ncu --csv --page raw` report by kernel name: launches, total and mean time, and the
means of the other metrics in it (DRAM / SM throughput in % of peak, grid size, active warps).

    python3 tools/ncu_summary.py REPORT.csv [REPORT.csv ...]   -> a table per report, longest first

Used by `tools/gpu_check.sh profile`. Stdlib only."""
import csv
import io
import sys
from collections import defaultdict

TIME = "gpu__time_duration.sum"
TIME_SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
SHORT = {  # column titles for the other metrics
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm%",
    "launch__grid_size": "grid",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps%",
}


def number(text):
    """ncu writes numbers with thousands separators in some locales; '' or 'n/a' -> None."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_report(path):
    """-> (rows as dicts, units dict). ncu's raw page: a header, a units row, then one row a kernel;
    anything before the header (the program's own output, ==PROF== lines) is skipped."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, body = table[0], table[1], table[2:]
    return [dict(zip(header, row)) for row in body if len(row) == len(header)], dict(zip(header, units))


def summarize(path, top=15):
    rows, units = read_report(path)
    if TIME not in units:
        raise ValueError(f"{path}: the report has no {TIME} column")
    scale = TIME_SCALE_US.get(units[TIME].strip(), None)
    if scale is None:
        raise ValueError(f"{path}: unknown time unit '{units[TIME]}'")
    others = [m for m in SHORT if m in units]
    groups = defaultdict(lambda: {"n": 0, "us": 0.0, **{m: [] for m in others}})
    for r in rows:
        t = number(r.get(TIME, ""))
        if t is None:
            continue
        g = groups[r.get("Kernel Name", "?")]
        g["n"] += 1
        g["us"] += t * scale
        for m in others:
            v = number(r.get(m, ""))
            if v is not None:
                g[m].append(v)
    total = sum(g["us"] for g in groups.values())
    out = [f"{path}: {sum(g['n'] for g in groups.values())} launches, {total:.1f} us in all"]
    out.append(f"  {'kernel':<58} {'n':>5} {'total_us':>10} {'mean_us':>9} " + " ".join(f"{SHORT[m]:>7}" for m in others))
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["us"])[:top]:
        means = " ".join(f"{(sum(g[m]) / len(g[m]) if g[m] else float('nan')):>7.1f}" for m in others)
        out.append(f"  {name[:58]:<58} {g['n']:>5} {g['us']:>10.1f} {g['us'] / g['n']:>9.2f} {means}")
    return "\n".join(out)


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    status = 0
    for p in paths:
        try:
            print(summarize(p))
        except (OSError, ValueError) as e:
            print(f"ncu_summary: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
