#!/usr/bin/env python3
"""16 concurrent openai clients against one `edgespec serve` (default model and its DFlash draft,
CPU backend, --max-batch 8 so some requests also wait in the queue): mixed prompt lengths (one
past the prefill chunk, so its prefill is chunked between decode steps; several sharing a long
prefix, so the prefix cache serves them), mixed max_tokens, greedy and sampled requests (with
seeds, different top_p / top_k), chat and completions, streamed and not, arriving at staggered
times. A request's answer must depend only on its prompt, settings and seed: each must equal its
solo run, the same request sent alone to the same server before the burst.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

CLIENTS = 16
STAGGER_S = 0.25  # client i starts about i * STAGGER_S after the first (shuffled order)

SHARED = ("The following is a report about the history of lighthouses along the northern coast. "
          "Lighthouses were built to guide ships safely past rocks and sandbanks at night. ") * 6
LONG = ("In the beginning the town had one street, one well and one bakery, and every morning "
        "the baker rang a bell so that the farmers would know the bread was ready. ") * 12


def requests():
    """The 16 requests: (kind, body without model/stream, stream?)."""
    prompts = [
        "Hi",
        "What is 2 + 2?",
        "Name three colors.",
        "Write a haiku about autumn leaves falling in the quiet forest.",
        SHARED + "Summarize the report in one sentence.",
        SHARED + "What did lighthouses guide?",
        SHARED + "Write a title for the report.",
        LONG + "What did the baker ring?",
        "Explain why the sky is blue to a child.",
        "List two fruits.",
        "Translate 'good morning' into French.",
        "Once upon a time",
        "The quick brown fox",
        "Count from one to five:",
        "A recipe for pancakes:",
        "Dear diary, today",
    ]
    samplings = [  # greedy and sampled, different top_p / top_k, each with its seed
        {"temperature": 0},
        {"temperature": 0.7, "seed": 11},
        {"temperature": 1.0, "seed": 12, "top_p": 0.9},
        {"temperature": 0},
        {"temperature": 0.8, "seed": 13, "top_k": 40},
        {"temperature": 0},
        {"temperature": 0.9, "seed": 14, "top_p": 0.8, "top_k": 20},
        {"temperature": 0},
        {"temperature": 1.0, "seed": 15},
        {"temperature": 0},
        {"temperature": 0.75, "seed": 16, "top_k": 5},
        {"temperature": 0},
        {"temperature": 0.85, "seed": 17, "top_p": 0.95},
        {"temperature": 0.7, "seed": 18},
        {"temperature": 0},
        {"temperature": 1.0, "seed": 19, "top_k": 100, "top_p": 0.9},
    ]
    max_tokens = [8, 24, 16, 40, 12, 20, 32, 16, 40, 8, 24, 32, 16, 24, 40, 12]
    out = []
    for i in range(CLIENTS):
        kind = "chat" if i % 3 != 2 else "completion"
        body = dict(samplings[i], max_tokens=max_tokens[i])
        if kind == "chat":
            body["messages"] = [{"role": "user", "content": prompts[i]}]
        else:
            body["prompt"] = prompts[i]
        out.append((kind, body, i % 2 == 1))
    return out


def call(client, model, kind, body, stream):
    """(text, finish_reason, completion_tokens) through the openai client."""
    body = dict(body)
    extra = {"top_k": body.pop("top_k")} if "top_k" in body else None
    create = client.chat.completions.create if kind == "chat" else client.completions.create
    if not stream:
        r = create(model=model, extra_body=extra, **body)
        c = r.choices[0]
        return (c.message.content if kind == "chat" else c.text, c.finish_reason,
                r.usage.completion_tokens)
    text, finish, tokens = "", None, None
    for chunk in create(model=model, extra_body=extra, stream=True,
                        stream_options={"include_usage": True}, **body):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for c in chunk.choices:
            text += (c.delta.content if kind == "chat" else c.text) or ""
            finish = c.finish_reason or finish
    return text, finish, tokens


def main():
    args = h.parse_args(__doc__)
    openai = h.require_openai()
    _, draft_dir = h.default_model_dirs()
    checks = h.Checks("server_concurrency")
    server = h.Server(args.edgespec, ["--draft", draft_dir, "--max-batch", "8"])
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                               max_retries=0, timeout=300)
        reqs = requests()
        m0 = server.metrics()
        t0 = time.monotonic()
        solo = [call(client, server.model, kind, body, False) for kind, body, _ in reqs]
        print(f"solo runs: {time.monotonic() - t0:.1f} s", flush=True)

        order = list(range(CLIENTS))
        random.Random(41).shuffle(order)
        start_at = {i: k * STAGGER_S for k, i in enumerate(order)}
        results, errors = [None] * CLIENTS, [None] * CLIENTS
        t0 = time.monotonic()

        def client_thread(i):
            time.sleep(max(0.0, t0 + start_at[i] - time.monotonic()))
            kind, body, stream = reqs[i]
            try:
                results[i] = call(client, server.model, kind, body, stream)
            except Exception as e:  # noqa: BLE001 - reported as the request's failure
                errors[i] = f"{type(e).__name__}: {e}"

        threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"burst of {CLIENTS}: {time.monotonic() - t0:.1f} s", flush=True)

        for i, (kind, body, stream) in enumerate(reqs):
            what = (f"request {i} ({kind}, {'streamed' if stream else 'not streamed'}, "
                    f"{ {k: v for k, v in body.items() if k not in ('messages', 'prompt')} })")
            if errors[i]:
                checks.fail(f"{what} failed in the burst: {errors[i]}")
                continue
            checks.equal(f"{what}: the answer in the burst equals its solo run "
                         f"(text, finish_reason, completion_tokens)", solo[i], results[i])
        checks.ok(any(s[2] > 1 for s in solo), "the solo runs generated tokens", repr(solo))
        m1 = server.wait_idle(checks, "after the burst")
        reused = (m1.get("edgespec_reused_prompt_tokens_total", 0)
                  - m0.get("edgespec_reused_prompt_tokens_total", 0))
        checks.ok(reused >= 128, f"the prefix cache serves the prompts that share a long prefix "
                                 f"(edgespec_reused_prompt_tokens_total grew by {reused})")
    finally:
        server.stop(checks)
    checks.finish()


if __name__ == "__main__":
    main()
