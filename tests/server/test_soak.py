#!/usr/bin/env python3
"""A bounded soak of `edgespec serve` (default model, CPU backend, --max-batch 12): 300 short
requests (max_tokens 8 to 24, chat and completions, streamed and not, greedy and sampled) from 12
openai clients at once, in under two minutes. Zero errors; every answer well-formed; the metrics
count every request and token; no KV page leaked; the server's resident memory flat between the
first 100 requests and the end.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

REQUESTS = 300
CLIENTS = 12
WARM = 100  # RSS is read after this many requests, and again at the end
TIME_LIMIT_S = 120
# Resident memory after the first WARM requests, and at the end, may differ by at most
# RSS_GROWTH of the first reading plus RSS_SLACK_KIB. By WARM every path has run (batch sizes 1
# to CLIENTS, streamed and not, both routes, sampled and greedy, prefix records published), so
# later growth is either allocator noise or a leak. The noise: glibc's per-thread arenas (one per
# HTTP worker thread) grow in steps and keep freed blocks, a few MiB over a run (about 4 MiB
# between request 100 and 300 of a ~400 MiB server on a 2-core CPU). 8 MiB absorbs a few arena
# steps; the 10 % (~40 MiB) keeps allocator and thread-count differences between machines from
# failing the test. What it catches: any per-request leak over ~240 KiB (a request's KV-sized
# buffers, its logits, a thread's stack) across the last 200 requests. Smaller leaks (a prompt's
# text) hide in the margin; the RSS curve is printed so they can be seen. KV pages live in the
# preallocated pool and are checked exactly through /metrics instead.
RSS_GROWTH = 0.10
RSS_SLACK_KIB = 8 * 1024

WORDS = ("river mountain lantern copper violet harbor meadow thunder pepper orbit marble "
         "falcon cedar ember glacier").split()


def make_requests(seed=41):
    rng = random.Random(seed)
    out = []
    for i in range(REQUESTS):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        body = {"max_tokens": rng.randint(8, 24)}
        if rng.random() < 0.5:
            body["temperature"] = 0
        else:
            body.update(temperature=round(rng.uniform(0.7, 1.0), 2), seed=rng.randint(0, 1 << 31),
                        top_p=rng.choice([1.0, 0.9]))
        kind = "chat" if rng.random() < 0.4 else "completion"
        if kind == "chat":
            body["messages"] = [{"role": "user", "content": f"Say something about {words}."}]
        else:
            body["prompt"] = f"A note on {words}:"
        out.append((kind, body, rng.random() < 0.5))
    return out


def run_one(client, model, kind, body, stream):
    """(finish_reason, prompt_tokens, completion_tokens, text)."""
    create = client.chat.completions.create if kind == "chat" else client.completions.create
    if not stream:
        r = create(model=model, **body)
        c = r.choices[0]
        return (c.finish_reason, r.usage.prompt_tokens, r.usage.completion_tokens,
                c.message.content if kind == "chat" else c.text)
    text, finish, usage = "", None, None
    for chunk in create(model=model, stream=True, stream_options={"include_usage": True},
                        **body):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += (c.delta.content if kind == "chat" else c.text) or ""
            finish = c.finish_reason or finish
    if usage is None:
        raise RuntimeError("the stream ended without a usage chunk")
    return finish, usage.prompt_tokens, usage.completion_tokens, text


def main():
    args = h.parse_args(__doc__)
    openai = h.require_openai()
    checks = h.Checks("server_soak")
    server = h.Server(args.edgespec, ["--max-batch", str(CLIENTS), "--context", "512"])
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                               max_retries=0, timeout=120)
        reqs = make_requests()
        m0 = server.metrics()
        lock = threading.Lock()
        state = {"next": 0, "done": 0, "rss_warm": None}
        results, errors = [None] * REQUESTS, []
        rss_curve = []  # (requests done, KiB): printed, to tell a steady climb from noise

        def worker():
            while True:
                with lock:
                    i = state["next"]
                    state["next"] += 1
                if i >= REQUESTS:
                    return
                kind, body, stream = reqs[i]
                try:
                    results[i] = run_one(client, server.model, kind, body, stream)
                except Exception as e:  # noqa: BLE001 - every error is a failure, reported
                    with lock:
                        errors.append(f"request {i} ({kind}, stream {stream}, {body}): "
                                      f"{type(e).__name__}: {e}")
                with lock:
                    state["done"] += 1
                    if state["done"] % 50 == 0:
                        rss_curve.append((state["done"], server.rss_kib()))
                    if state["done"] == WARM:
                        state["rss_warm"] = server.rss_kib()

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIME_LIMIT_S * 3)
        took = time.monotonic() - t0
        m1 = server.wait_idle(checks, f"after {REQUESTS} requests")
        rss_end = server.rss_kib()
        print(f"{REQUESTS} requests from {CLIENTS} clients in {took:.1f} s; RSS after {WARM}: "
              f"{state['rss_warm']} KiB, at the end: {rss_end} KiB; every 50: {rss_curve}",
              flush=True)

        checks.equal("requests that failed", [], errors[:10])
        checks.ok(took < TIME_LIMIT_S, f"{REQUESTS} requests take under {TIME_LIMIT_S} s "
                                       f"({took:.1f} s)")
        done = [r for r in results if r is not None]
        bad = [(i, r) for i, r in enumerate(results) if r is not None and not (
            r[0] in ("stop", "length") and 1 <= r[2] <= reqs[i][1]["max_tokens"]
            and (r[0] == "stop" or r[2] == reqs[i][1]["max_tokens"]) and r[1] >= 1)]
        checks.equal("answers with a bad finish_reason or token count", [], bad[:10])
        total = sum(m1.get(f'edgespec_requests_total{{finish_reason="{f}"}}', 0)
                    - m0.get(f'edgespec_requests_total{{finish_reason="{f}"}}', 0)
                    for f in ("stop", "length", "cancelled", "error"))
        checks.equal("edgespec_requests_total counts every request", float(REQUESTS), total)
        for f in ("cancelled", "error"):
            checks.equal(f"no request finished {f}", 0.0, h.finished(m1, f) - h.finished(m0, f))
        checks.equal("edgespec_generated_tokens_total grew by the answers' completion_tokens",
                     float(sum(r[2] for r in done)),
                     m1.get("edgespec_generated_tokens_total", 0)
                     - m0.get("edgespec_generated_tokens_total", 0))
        checks.equal("edgespec_prompt_tokens_total grew by the answers' prompt_tokens",
                     float(sum(r[1] for r in done)),
                     m1.get("edgespec_prompt_tokens_total", 0)
                     - m0.get("edgespec_prompt_tokens_total", 0))
        warm = state["rss_warm"]
        if checks.ok(warm is not None, "RSS was read after the first requests"):
            limit = warm * (1 + RSS_GROWTH) + RSS_SLACK_KIB
            per_request = (rss_end - warm) / (REQUESTS - WARM)
            checks.ok(rss_end <= limit,
                      f"RSS flat: {rss_end} KiB at the end <= {limit:.0f} KiB ({warm} KiB after "
                      f"{WARM} requests + {RSS_GROWTH:.0%} + {RSS_SLACK_KIB} KiB); "
                      f"{per_request:.1f} KiB per request")
    finally:
        server.stop(checks)
    checks.finish()


if __name__ == "__main__":
    main()
