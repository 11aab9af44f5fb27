#!/usr/bin/env python3
"""Summarises one kernel's SASS-level ncu source page: instruction mix and stall reasons.

Input: the CSV of `ncu -i REPORT --page source --print-source sass --csv` for one profiled launch
(a report made with `--set full --import-source yes`, or at least the SourceCounters section).
Prints, per opcode (the mnemonic before the first '.'), the warp instructions executed and their
share, and the stall samples; the stall reasons over the whole kernel; the most sampled lines.
With --per N the counts are also divided by N (e.g. warps x tiles, for "per warp and tile").

  python3 tools/ncu_sass_summary.py sass.csv --per 135168 --top 30
"""
import argparse
import collections
import csv
import sys


def opcode(source):
    tokens = source.split()
    if not tokens:
        return ""
    op = tokens[1] if tokens[0].startswith("@") and len(tokens) > 1 else tokens[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--per", type=float, default=0.0, help="also divide the counts by this")
    ap.add_argument("--top", type=int, default=25, help="most sampled lines to print")
    args = ap.parse_args()

    rows = list(csv.reader(open(args.csv, newline="")))
    header_at = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r), None)
    if header_at is None:
        sys.exit(f"{args.csv}: no 'Source' / 'Instructions Executed' header (not a SASS source page)")
    hdr = rows[header_at]
    col = {h: i for i, h in enumerate(hdr)}
    samples_col = "Warp Stall Sampling (All Samples)"
    stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    executed = collections.Counter()
    sampled = collections.Counter()
    stalls = collections.Counter()
    lines = []
    total = 0
    for r in rows[header_at + 1:]:
        if len(r) < len(hdr):
            continue
        src = r[col["Source"]].strip()
        n = int(r[col["Instructions Executed"]] or 0)
        smp = int(r[col[samples_col]] or 0) if samples_col in col else 0
        op = opcode(src)
        executed[op] += n
        sampled[op] += smp
        total += n
        for c in stall_cols:
            stalls[c] += int(r[col[c]] or 0)
        lines.append((smp, n, r[col["Address"]] if "Address" in col else "", src))

    if total == 0:
        sys.exit(f"{args.csv}: no executed instructions")
    per = f" {'per unit':>10s}" if args.per else ""
    print(f"warp instructions executed: {total:,}" + (f" ({total / args.per:,.1f} per unit)" if args.per else ""))
    print(f"{'opcode':14s} {'executed':>12s} {'share':>6s}{per} {'samples':>8s}")
    for op, n in executed.most_common():
        if n * 200 < total:  # below 0.5 %
            continue
        extra = f" {n / args.per:10.1f}" if args.per else ""
        print(f"{op:14s} {n:12,d} {100.0 * n / total:5.1f}%{extra} {sampled[op]:8d}")
    stall_total = sum(stalls.values())
    if stall_total:
        print("stall reasons (share of all samples):")
        for c, v in stalls.most_common(12):
            print(f"  {c[len('stall_'):]:22s} {100.0 * v / stall_total:5.1f}%")
    print(f"most sampled lines (samples, executed, address, SASS):")
    for smp, n, addr, src in sorted(lines, key=lambda x: -x[0])[: args.top]:
        print(f"  {smp:6d} {n:10,d} {addr[-6:]:>6s}  {src[:100]}")


if __name__ == "__main__":
    main()
