#!/usr/bin/env python3
"""τ and end-to-end decode speed of a DFlash draft on real prompts, through `edgespec generate`.

    python3 tools/draft_eval.py --edgespec build/edgespec --model MODEL --draft DRAFT \
        --prompts train/data/prompts_heldout.jsonl --limit 20 -n 256 --temperatures 0,1 \
        [--backend cuda] [--verify-width auto|W] [--json report.json]

For every temperature it runs `generate --json --warmup --one-at-a-time` over all the prompts
twice, without and with the draft (each prompt alone at batch 1, in one process, so the model
loads once; the model's chat template, its end-of-turn tokens as stops; sampled runs use the same
seed per prompt), and reports per temperature:
  * tau: tokens emitted per speculative step over all prompts (sum of tokens / sum of steps, from
    each run's accept histogram: entry k counts steps that emitted k tokens);
  * decode tok/s without and with the draft: tokens after the first, over the decode loop's time,
    summed over prompts (so long answers weigh more), and their ratio (the speedup);
  * greedy only: how many prompts give the same tokens with and without the draft (speculative
    greedy decoding is exact; a difference can only come from a near-tie in the target's bf16
    logits between a 1-row and a block-row forward, which the report counts rather than hides).
`--verify-width` goes to the runs with the draft (generate's flag: the rows a speculative step
verifies, 2 to the block size; auto = generate's default for the backend); the report records the
width each run used. `--warmup` makes each process run its requests for a few tokens untimed first, so the one-time CUDA
graph capture is not in the timings.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def read_prompts(path, limit):
    with open(path, encoding="utf-8") as f:
        prompts = [json.loads(line)["prompt"] for line in f if line.strip()]
    return prompts[:limit] if limit else prompts


def generate_all(a, prompts, temperature, draft):
    """One `generate` process over all prompts, one at a time; its JSON lines in prompt order.
    Prompt i is seeded 1000 + i (the same with and without the draft)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump([{"prompt": p, "temperature": temperature, "seed": 1000 + i} for i, p in enumerate(prompts)], f)
        requests = f.name
    cmd = [a.edgespec, "generate", "--model", a.model, "--json", "--warmup", "--one-at-a-time",
           "-n", str(a.max_new_tokens), "--backend", a.backend, "--input-file", requests]
    if draft:
        cmd += ["--draft", a.draft, "--verify-width", a.verify_width]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(requests)
    if run.returncode != 0:
        sys.exit(f"draft_eval: {' '.join(cmd[:8])} … failed ({run.returncode}):\n{run.stderr[-2000:]}")
    outs = [json.loads(line) for line in run.stdout.strip().splitlines()]
    if len(prompts) > 1 and [o.get("request") for o in outs] != list(range(len(prompts))):
        sys.exit(f"draft_eval: expected {len(prompts)} answers in request order from {' '.join(cmd[:8])} …")
    return outs


def decode_totals(rows, which):
    """(tokens after each run's first, decode-loop seconds), summed over the rows' `which` runs.
    decode_tok_s = (tokens - 1) / loop seconds, so the seconds are recovered to be summed."""
    runs = [r[which] for r in rows]
    tokens = sum(len(x["tokens"]) - 1 for x in runs)
    seconds = sum((len(x["tokens"]) - 1) / x["decode_tok_s"] for x in runs if x["decode_tok_s"] > 0)
    return tokens, seconds


def summarize(rows, temperature):
    plain_tok, plain_s = decode_totals(rows, "plain")
    spec_tok, spec_s = decode_totals(rows, "spec")
    steps = sum(sum(r["spec"]["accept_histogram"]) for r in rows)
    emitted = sum(sum(k * c for k, c in enumerate(r["spec"]["accept_histogram"])) for r in rows)
    hist = [sum(r["spec"]["accept_histogram"][k] for r in rows) for k in range(len(rows[0]["spec"]["accept_histogram"]))]
    out = {"temperature": temperature, "prompts": len(rows), "verify_width": rows[0]["spec"].get("verify_width"),
           "tau": emitted / steps if steps else None,
           "speculative_steps": steps, "tokens_per_step_histogram": hist,
           "plain_tok_s": plain_tok / plain_s if plain_s else None,
           "draft_tok_s": spec_tok / spec_s if spec_s else None,
           "plain_tokens": plain_tok + len(rows), "draft_tokens": spec_tok + len(rows)}
    if out["plain_tok_s"] and out["draft_tok_s"]:
        out["speedup"] = out["draft_tok_s"] / out["plain_tok_s"]
    if temperature == 0:
        out["identical_outputs"] = sum(1 for r in rows if r["plain"]["tokens"] == r["spec"]["tokens"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--edgespec", default="build/edgespec")
    p.add_argument("--model", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--prompts", default="train/data/prompts_heldout.jsonl")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("-n", "--max-new-tokens", type=int, default=256)
    p.add_argument("--temperatures", default="0,1")
    p.add_argument("--backend", default="auto")
    p.add_argument("--verify-width", default="auto",
                   help="rows a speculative step verifies (2 to the draft's block size, or auto)")
    p.add_argument("--json", help="write the report here")
    a = p.parse_args()
    prompts = read_prompts(a.prompts, a.limit)
    report = {"model": a.model, "draft": a.draft, "prompts_file": a.prompts, "max_new_tokens": a.max_new_tokens,
              "backend": a.backend, "verify_width_flag": a.verify_width, "results": []}
    for t in [float(x) for x in a.temperatures.split(",")]:
        plain, spec = generate_all(a, prompts, t, False), generate_all(a, prompts, t, True)
        rows = [{"plain": x, "spec": y} for x, y in zip(plain, spec)]
        s = summarize(rows, t)
        report["results"].append(s)
        report["backend_used"] = rows[0]["plain"]["backend"]
        line = (f"T={t:g}: {s['prompts']} prompts, W {s['verify_width']}, tau {s['tau']:.2f}, plain {s['plain_tok_s']:.1f} tok/s, "
                f"with draft {s['draft_tok_s']:.1f} tok/s, speedup {s.get('speedup', float('nan')):.2f}x")
        if "identical_outputs" in s:
            line += f", identical outputs {s['identical_outputs']}/{s['prompts']}"
        print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
