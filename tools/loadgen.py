#!/usr/bin/env python3
"""Closed-loop load generator for OpenAI-compatible completion servers (edgespec serve,
llama.cpp's llama-server). Python 3 standard library only.

    tools/loadgen.py run --url http://127.0.0.1:8080 --label NAME [--concurrency 1,4,16,64]
        [--requests auto|N|N1,N2,...] [--prompt-words 128] [--max-tokens 128] [--temperature 0]
        [--seed 0] [--warmup 1] [--model M] [--endpoint completions|chat]
        [--prompts-file PROMPTS.jsonl] [--json OUT.json] [--markdown OUT.md]
    tools/loadgen.py table A.json B.json ...      one markdown table over several runs (run
                                                  reports or serve_bench.json)

For each concurrency C the generator runs C workers; each sends its next request as soon as
its last one finishes (closed loop) until the level's request count is done. Every level first
runs `--warmup` requests per worker (not measured), so a server's first-batch costs (CUDA graph
capture, allocator growth) stay out of the figures.

Requests: POST /v1/completions, stream true with stream_options.include_usage, prompt a text of
random common English words (each " word" is one token in GPT-2 style BPE vocabularies, so the
prompt has about `--prompt-words` tokens), max_tokens fixed. The i-th request of a level has
the same prompt and length in every run (seeded), so two servers see the same load; levels and
warm-ups use disjoint prompts, so no prompt is in a prefix cache from an earlier level. Seeds
are sent only when the temperature is above 0. Prompts of random words rarely make a model stop
early, but the counts reported are what the server generated: usage.completion_tokens, else
llama-server's timings.predicted_n, else the number of text chunks. --prompts-file (JSON lines
with a "prompt" each, e.g. train/data/prompts_heldout.jsonl) draws real prompts instead (seeded),
for a trained draft whose acceptance depends on the text; --endpoint chat sends them as one user
message to /v1/chat/completions (the model's chat template) and reads delta.content.

Per level: aggregate output tokens/s and requests/s over the level's wall time (first send to
last answer), time to first token (first chunk with text), inter-token latency (gaps between
consecutive text chunks, as vLLM's benchmark counts them; a speculative server may put several
tokens in one chunk), time per output token ((last chunk - first chunk) / (tokens - 1) per
request), p50 / p99 / mean of each in ms, errors (non-200 answers, broken streams, time-outs),
finish reasons. When the server's GET /metrics has edgespec_mean_accept_length it is recorded.
Exit status 1 when any measured request failed (the JSON is written first).
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

# Common English words that are single tokens with a leading space in GPT-2 style BPE
# vocabularies (Qwen2/3, SmolLM2, Llama 3), so a prompt's token count is close to its word count.
WORDS = (
    "the of and to in is was for that with as on by he at from his it an were are which this be "
    "or has had one first their its after new who they have her she two been other when there all "
    "during into school time may years more most only over city some world would where later up "
    "such used many can state about national out known university united then made film under "
    "team three year music also well part around season both them game war these best being "
    "river against series water since people work each area family house light small night "
    "story road early green black white paper table window garden summer winter morning evening"
).split()


def percentile(values, q):
    """Linear interpolation between closest ranks; None for an empty list."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary_ms(values):
    """p50 / p99 / mean in milliseconds of a list of seconds."""
    if not values:
        return {"p50": None, "p99": None, "mean": None, "n": 0}
    return {"p50": round(percentile(values, 50) * 1e3, 3),
            "p99": round(percentile(values, 99) * 1e3, 3),
            "mean": round(sum(values) / len(values) * 1e3, 3), "n": len(values)}


def make_prompt(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


def parse_int_list(text, name):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"loadgen: --{name} = '{text}' must be a comma-separated list of integers")
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"loadgen: --{name} = '{text}' must list integers >= 1")
    return values


class Target:
    """Where requests go: host, port and path prefix of --url."""

    def __init__(self, url, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise SystemExit(f"loadgen: --url = '{url}' must be http://HOST:PORT[/PREFIX]")
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.timeout = timeout

    def connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def get(self, path):
        conn = self.connect()
        try:
            conn.request("GET", self.prefix + path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()


def sse_events(resp):
    """The JSON payloads of an SSE stream's `data:` lines, with their arrival times; stops at
    `data: [DONE]` or the end of the body."""
    while True:
        line = resp.readline()
        if not line:
            return
        now = time.perf_counter()
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield now, json.loads(data)


def one_request(target, spec, args):
    """Sends one streaming completion; returns a result dict (error set on failure)."""
    body = {"max_tokens": spec["max_tokens"], "stream": True,
            "stream_options": {"include_usage": True}, "temperature": args.temperature}
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": spec["prompt"]}]
    else:
        body["prompt"] = spec["prompt"]
    if args.temperature > 0:
        body["seed"] = spec["seed"]
    if args.model:
        body["model"] = args.model
    result = {"error": None, "chunk_times": [], "completion_tokens": None, "prompt_tokens": None,
              "finish_reason": None}
    conn = target.connect()
    t0 = time.perf_counter()
    result["start"] = t0
    try:
        path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
        conn.request("POST", target.prefix + path, body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read().decode("utf-8", "replace")
            result["error"] = f"HTTP {resp.status}: {text[:200]}"
            return result
        chunks = 0
        for now, event in sse_events(resp):
            if "error" in event:
                result["error"] = f"stream error: {json.dumps(event['error'])[:200]}"
                return result
            choices = event.get("choices") or []
            if choices:
                c = choices[0]
                if c.get("text") or (c.get("delta") or {}).get("content"):
                    result["chunk_times"].append(now)
                    chunks += 1
                if c.get("finish_reason"):
                    result["finish_reason"] = c["finish_reason"]
            usage = event.get("usage")
            if usage:
                result["completion_tokens"] = usage.get("completion_tokens")
                result["prompt_tokens"] = usage.get("prompt_tokens")
            timings = event.get("timings")  # llama-server
            if timings and result["completion_tokens"] is None:
                result["completion_tokens"] = timings.get("predicted_n")
                result["prompt_tokens"] = timings.get("prompt_n")
        if result["completion_tokens"] is None:
            result["completion_tokens"] = chunks
        if result["finish_reason"] is None:
            result["error"] = "stream ended without a finish_reason"
    except (OSError, http.client.HTTPException, ValueError) as e:
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        result["end"] = time.perf_counter()
        conn.close()
    return result


def run_closed_loop(target, specs, concurrency, args):
    """Runs `specs` with `concurrency` workers, each taking the next spec when done."""
    results = [None] * len(specs)
    lock = threading.Lock()
    next_index = [0]

    def worker():
        while True:
            with lock:
                i = next_index[0]
                if i >= len(specs):
                    return
                next_index[0] += 1
            results[i] = one_request(target, specs[i], args)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, t0, time.perf_counter()


def level_specs(args, count, offset):
    """The request specs `offset`..`offset + count - 1`: the same for every run and server.
    Each level (and its warm-up) starts at its own offset, so no level's prompts are in a
    server's prefix cache from an earlier level."""
    specs = []
    for i in range(offset, offset + count):
        rng = random.Random(args.seed * 1000003 + i)
        words = rng.choice(args.prompt_words)
        prompt = rng.choice(args.prompts) if args.prompts else make_prompt(rng, words)
        specs.append({"prompt": prompt, "max_tokens": rng.choice(args.max_tokens),
                      "seed": args.seed + i})
    return specs


def summarise(concurrency, results, t0, t1):
    ok = [r for r in results if r["error"] is None]
    errors = [r["error"] for r in results if r["error"] is not None]
    ttft, itl, tpot = [], [], []
    finish = {}
    for r in ok:
        ct = r["chunk_times"]
        if ct:
            ttft.append(ct[0] - r["start"])
            itl.extend(b - a for a, b in zip(ct, ct[1:]))
            if r["completion_tokens"] and r["completion_tokens"] > 1:
                tpot.append((ct[-1] - ct[0]) / (r["completion_tokens"] - 1))
        finish[r["finish_reason"]] = finish.get(r["finish_reason"], 0) + 1
    out_tokens = sum(r["completion_tokens"] or 0 for r in ok)
    prompt_tokens = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    wall = t1 - t0
    return {
        "concurrency": concurrency, "requests": len(results), "errors": len(errors),
        "error_examples": errors[:3], "duration_s": round(wall, 3),
        "output_tokens": out_tokens, "output_tok_s": round(out_tokens / wall, 2),
        "requests_s": round(len(ok) / wall, 3),
        "mean_completion_tokens": round(out_tokens / len(ok), 2) if ok else None,
        "mean_prompt_tokens": round(sum(prompt_tokens) / len(prompt_tokens), 1)
        if prompt_tokens else None,
        "finish_reasons": finish, "ttft_ms": summary_ms(ttft), "itl_ms": summary_ms(itl),
        "tpot_ms": summary_ms(tpot),
    }


def scrape_tau(target):
    """edgespec_mean_accept_length from GET /metrics, or None where there is none."""
    try:
        status, text = target.get("/metrics")
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    for line in text.splitlines():
        if line.startswith("edgespec_mean_accept_length"):
            try:
                return float(line.split()[-1])
            except ValueError:
                return None
    return None


def cmd_run(args):
    target = Target(args.url, args.timeout)
    levels = parse_int_list(args.concurrency, "concurrency")
    if args.requests == "auto":
        counts = [min(128, max(16, 4 * c)) for c in levels]
    else:
        counts = parse_int_list(args.requests, "requests")
        if len(counts) == 1:
            counts = counts * len(levels)
        if len(counts) != len(levels):
            raise SystemExit(f"loadgen: --requests lists {len(counts)} counts for "
                             f"{len(levels)} concurrency levels")
    args.prompt_words = parse_int_list(args.prompt_words, "prompt-words")
    args.max_tokens = parse_int_list(args.max_tokens, "max-tokens")
    if args.temperature < 0:
        raise SystemExit(f"loadgen: --temperature = {args.temperature} must be >= 0")
    args.prompts = []
    if args.prompts_file:
        try:
            with open(args.prompts_file, encoding="utf-8") as f:
                args.prompts = [json.loads(line)["prompt"] for line in f if line.strip()]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"loadgen: --prompts-file {args.prompts_file}: {e} (JSON lines "
                             "with a \"prompt\" string each)")
        if not args.prompts:
            raise SystemExit(f"loadgen: --prompts-file {args.prompts_file} holds no prompts")
    report = {"label": args.label, "url": args.url,
              "config": {"concurrency": levels, "requests": counts,
                         "prompt_words": args.prompt_words, "max_tokens": args.max_tokens,
                         "temperature": args.temperature, "seed": args.seed,
                         "endpoint": args.endpoint, "prompts_file": args.prompts_file,
                         "warmup_per_worker": args.warmup},
              "levels": []}
    failed = False
    for c, n in zip(levels, counts):
        if args.warmup > 0:
            warm, _, _ = run_closed_loop(
                target, level_specs(args, args.warmup * c, 10**7 + 10**5 * c), c, args)
            bad = [r["error"] for r in warm if r["error"]]
            if bad:
                print(f"loadgen: {args.label}: warm-up at concurrency {c}: {len(bad)} errors, "
                      f"first: {bad[0]}", file=sys.stderr)
        results, t0, t1 = run_closed_loop(target, level_specs(args, n, 10**5 * c), c, args)
        level = summarise(c, results, t0, t1)
        tau = scrape_tau(target)
        if tau is not None:
            level["mean_accept_length"] = tau
        report["levels"].append(level)
        failed |= level["errors"] > 0
        print(f"loadgen: {args.label} c={c}: {level['output_tok_s']} tok/s, "
              f"ttft p50 {level['ttft_ms']['p50']} ms, itl p50 {level['itl_ms']['p50']} ms, "
              f"errors {level['errors']}"
              + (f" (first: {level['error_examples'][0]})" if level["errors"] else ""),
              file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    table = markdown_table([report])
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if not args.quiet:
        print(table, end="")
    return 1 if failed else 0


def fmt(v, digits=1):
    return "—" if v is None else f"{v:,.{digits}f}"


def markdown_table(reports):
    """One row per server and level. "stream tok/s" is 1000 / TPOT p50: one stream's decode
    rate, the figure `edgespec bench` reports at batch 1."""
    lines = ["| server | C | requests | errors | out tok/s | stream tok/s | req/s | "
             "TTFT p50 / p99 ms | ITL p50 / p99 ms | TPOT p50 ms | tokens / req | τ |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rep in reports:
        for lv in rep["levels"]:
            tpot = lv["tpot_ms"]["p50"]
            lines.append(
                f"| {rep['label']} | {lv['concurrency']} | {lv['requests']} | {lv['errors']} | "
                f"{fmt(lv['output_tok_s'])} | {fmt(1e3 / tpot if tpot else None)} | "
                f"{fmt(lv['requests_s'], 2)} | "
                f"{fmt(lv['ttft_ms']['p50'])} / {fmt(lv['ttft_ms']['p99'])} | "
                f"{fmt(lv['itl_ms']['p50'], 2)} / {fmt(lv['itl_ms']['p99'], 2)} | "
                f"{fmt(tpot, 2)} | {fmt(lv['mean_completion_tokens'])} | "
                f"{fmt(lv.get('mean_accept_length'), 2)} |")
    return "\n".join(lines) + "\n"


def cmd_table(args):
    reports = []
    for path in args.files:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"loadgen: table: {path}: {e}", file=sys.stderr)
            return 1
        # A run report, or tools/serve_bench.sh's serve_bench.json holding several.
        found = data.get("loadgen", [data]) if isinstance(data, dict) else []
        if not found or not all(isinstance(r, dict) and "levels" in r for r in found):
            print(f"loadgen: table: {path} is neither a `loadgen.py run` report nor "
                  "serve_bench.json", file=sys.stderr)
            return 1
        reports.extend(found)
    print(markdown_table(reports), end="")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="sweep concurrency levels against one server")
    r.add_argument("--url", required=True, help="http://HOST:PORT of the server")
    r.add_argument("--label", default="server", help="the server's name in tables")
    r.add_argument("--concurrency", default="1,4,16,64", help="levels, comma-separated")
    r.add_argument("--requests", default="auto",
                   help="measured requests per level: N, a list (one per level), or auto "
                        "(min(128, max(16, 4 C)))")
    r.add_argument("--prompt-words", default="128",
                   help="prompt lengths in words (~tokens); a list is a seeded mix")
    r.add_argument("--max-tokens", default="128", help="max_tokens; a list is a seeded mix")
    r.add_argument("--temperature", type=float, default=0.0)
    r.add_argument("--seed", type=int, default=0, help="seeds the prompts and request seeds")
    r.add_argument("--warmup", type=int, default=1, help="unmeasured requests per worker first")
    r.add_argument("--model", help="the request's model field (omitted when absent)")
    r.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    r.add_argument("--prompts-file", help="JSON lines with a \"prompt\" each: real prompts")
    r.add_argument("--timeout", type=float, default=300.0, help="socket time-out, seconds")
    r.add_argument("--json", help="write the report here")
    r.add_argument("--markdown", help="write the markdown table here")
    r.add_argument("-q", "--quiet", action="store_true", help="do not print the table")
    t = sub.add_parser("table", help="one markdown table over several run reports")
    t.add_argument("files", nargs="+")
    args = ap.parse_args()
    sys.exit(cmd_run(args) if args.cmd == "run" else cmd_table(args))


if __name__ == "__main__":
    main()
