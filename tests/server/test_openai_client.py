#!/usr/bin/env python3
"""The official openai client against `edgespec serve` on the default model with its trained
DFlash draft (CPU backend): /health, /v1/models, chat and text completions, streaming and not.
Every greedy answer must equal `edgespec generate`'s for the same prompt and max tokens, token
for token (the CPU backend computes in f32, so speculative decoding gives exactly the plain
tokens): the same text, finish_reason, prompt_tokens and completion_tokens. Streamed text must
equal the non-streamed text, stop strings must be cut (also while streaming), and a sampled
request with a seed must give the same answer twice.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

CHAT = [  # (system or None, user message, max_tokens)
    (None, "What is the capital of France?", 32),  # ends on the end-of-turn token
    (None, "Write one sentence about the sea.", 12),  # ends on max_tokens
    ("You are a pirate. Answer briefly.", "Where is the treasure?", 20),
]
COMPLETIONS = [  # (prompt, max_tokens)
    ("The capital of France is", 24),
    ("Once upon a time, in a small village by the river,", 16),
]
METRICS = {"edgespec_requests_running", "edgespec_requests_queued", "edgespec_requests_total",
           "edgespec_request_errors_total", "edgespec_prompt_tokens_total",
           "edgespec_reused_prompt_tokens_total", "edgespec_generated_tokens_total",
           "edgespec_mean_accept_length", "edgespec_kv_pages_used", "edgespec_kv_pages_free",
           "edgespec_kv_pages_total", "edgespec_kv_pages_cached", "edgespec_step_seconds_sum",
           "edgespec_step_seconds_count"}
STOP_PROMPT, STOP, STOP_MAX = "The capital of France is", "answer", 32  # the stop is hit


def chat_messages(system, user):
    return ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}]


def usage_of(u):
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens}


def expected_of(ref):
    n, p = len(ref["tokens"]), ref["prompt_tokens"]
    return {"text": ref["text"], "finish_reason": ref["finish_reason"],
            "usage": {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}}


def stream_chat(client, model, **kw):
    """(text, finish_reason, usage dict or None, chunks) of a streamed chat completion."""
    text, finish, usage, chunks = "", None, None, []
    for c in client.chat.completions.create(model=model, stream=True,
                                            stream_options={"include_usage": True}, **kw):
        chunks.append(c)
        if c.usage is not None:
            usage = usage_of(c.usage)
        for ch in c.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return text, finish, usage, chunks


def stream_completion(client, model, **kw):
    text, finish, usage, chunks = "", None, None, []
    for c in client.completions.create(model=model, stream=True,
                                       stream_options={"include_usage": True}, **kw):
        chunks.append(c)
        if c.usage is not None:
            usage = usage_of(c.usage)
        for ch in c.choices:
            text += ch.text or ""
            finish = ch.finish_reason or finish
    return text, finish, usage, chunks


def main():
    args = h.parse_args(__doc__)
    openai = h.require_openai()
    model_dir, draft_dir = h.default_model_dirs()
    checks = h.Checks("server_openai_client")

    # The references: plain `edgespec generate` (--model given: no default draft).
    chat_refs = h.generate(args.edgespec, model_dir, [
        dict({"prompt": u, "max_new_tokens": n, "temperature": 0}, **({"system": s} if s else {}))
        for s, u, n in CHAT])
    comp_refs = h.generate(args.edgespec, model_dir, [
        {"prompt": p, "max_new_tokens": n, "temperature": 0} for p, n in COMPLETIONS], raw=True)
    stop_ref = h.generate(args.edgespec, model_dir, [
        {"prompt": STOP_PROMPT, "max_new_tokens": STOP_MAX, "temperature": 0}], raw=True,
        stops=[STOP])[0]
    checks.ok(chat_refs[1]["finish_reason"] == "length" and stop_ref.get("stop_string_hit"),
              "the reference prompts cover finish by length and by stop string",
              json.dumps([chat_refs[1], stop_ref]))

    # No --model: the embedded default model; its draft named explicitly, since on the CPU the
    # default draft is not used (runtime::defaultDraftPays) and this test wants it exercised.
    server = h.Server(args.edgespec, ["--draft", draft_dir, "--max-batch", "4"])
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                               max_retries=0, timeout=180)
        name = server.model

        status, _, raw = server.request("GET", "/health")
        checks.equal("GET /health", (200, {"status": "ok"}), (status, json.loads(raw or b"null")))

        models = client.models.list()
        checks.equal("/v1/models lists the served model",
                      [(name, "model", "edgespec")],
                      [(m.id, m.object, m.owned_by) for m in models.data])

        for (system, user, n), ref in zip(CHAT, chat_refs):
            want = expected_of(ref)
            what = f"chat {user!r} max_tokens {n}"
            r = client.chat.completions.create(model=name, messages=chat_messages(system, user),
                                               max_tokens=n, temperature=0)
            checks.ok(r.object == "chat.completion" and r.id.startswith("chatcmpl-")
                      and r.model == name and len(r.choices) == 1
                      and r.choices[0].message.role == "assistant",
                      f"{what}: the answer's shape", r.model_dump_json())
            checks.equal(f"{what}: equals edgespec generate", want,
                         {"text": r.choices[0].message.content,
                          "finish_reason": r.choices[0].finish_reason,
                          "usage": usage_of(r.usage)})
            text, finish, usage, chunks = stream_chat(client, name,
                                                      messages=chat_messages(system, user),
                                                      max_tokens=n, temperature=0)
            checks.equal(f"{what}, streamed: equals edgespec generate", want,
                         {"text": text, "finish_reason": finish, "usage": usage})
            checks.ok(all(c.object == "chat.completion.chunk" for c in chunks)
                      and chunks[0].choices and chunks[0].choices[0].delta.role == "assistant",
                      f"{what}, streamed: chunks are chat.completion.chunk, the first with role "
                      f"assistant", "\n".join(c.model_dump_json() for c in chunks[:3]))

        # The same question with max_completion_tokens, and with content as a list of parts.
        system, user, n = CHAT[0]
        want = expected_of(chat_refs[0])
        r = client.chat.completions.create(model=name, messages=chat_messages(system, user),
                                           max_completion_tokens=n, temperature=0)
        checks.equal("chat with max_completion_tokens equals generate", want,
                      {"text": r.choices[0].message.content,
                       "finish_reason": r.choices[0].finish_reason, "usage": usage_of(r.usage)})
        r = client.chat.completions.create(
            model=name, max_tokens=n, temperature=0,
            messages=[{"role": "user", "content": [{"type": "text", "text": user}]}])
        checks.equal("chat with content as [{type: text}] equals generate", want,
                     {"text": r.choices[0].message.content,
                      "finish_reason": r.choices[0].finish_reason, "usage": usage_of(r.usage)})

        for (prompt, n), ref in zip(COMPLETIONS, comp_refs):
            want = expected_of(ref)
            what = f"completion {prompt!r} max_tokens {n}"
            r = client.completions.create(model=name, prompt=prompt, max_tokens=n, temperature=0)
            checks.ok(r.object == "text_completion" and r.id.startswith("cmpl-")
                      and len(r.choices) == 1, f"{what}: the answer's shape", r.model_dump_json())
            checks.equal(f"{what}: equals edgespec generate --raw", want,
                         {"text": r.choices[0].text, "finish_reason": r.choices[0].finish_reason,
                          "usage": usage_of(r.usage)})
            text, finish, usage, _ = stream_completion(client, name, prompt=prompt, max_tokens=n,
                                                       temperature=0)
            checks.equal(f"{what}, streamed: equals edgespec generate --raw", want,
                         {"text": text, "finish_reason": finish, "usage": usage})
        # The prompt as a list holding one string is the same request.
        r = client.completions.create(model=name, prompt=[COMPLETIONS[0][0]],
                                      max_tokens=COMPLETIONS[0][1], temperature=0)
        checks.equal("completion with prompt [string] equals generate --raw",
                     expected_of(comp_refs[0])["text"], r.choices[0].text)

        # A stop string: cut before it, finish_reason stop, completion_tokens up to and
        # including the token that completed it; the same while streaming (held-back text).
        want = expected_of(stop_ref)
        r = client.completions.create(model=name, prompt=STOP_PROMPT, max_tokens=STOP_MAX,
                                      temperature=0, stop=[STOP])
        checks.equal(f"completion with stop {STOP!r} equals generate --stop", want,
                     {"text": r.choices[0].text, "finish_reason": r.choices[0].finish_reason,
                      "usage": usage_of(r.usage)})
        text, finish, usage, _ = stream_completion(client, name, prompt=STOP_PROMPT,
                                                   max_tokens=STOP_MAX, temperature=0,
                                                   stop=STOP)
        checks.equal(f"completion with stop {STOP!r}, streamed, equals generate --stop", want,
                     {"text": text, "finish_reason": finish, "usage": usage})

        # Sampling: the same seed gives the same answer (non-streamed and streamed), and it
        # differs from greedy.
        kw = dict(messages=chat_messages(None, "Tell me a short story about a cat."),
                  max_tokens=24, temperature=0.9, top_p=0.95, seed=1234,
                  extra_body={"top_k": 40})
        a = client.chat.completions.create(model=name, **kw)
        b = client.chat.completions.create(model=name, **kw)
        c, _, _, _ = stream_chat(client, name, **kw)
        checks.equal("a sampled chat with seed 1234 gives the same text twice",
                     a.choices[0].message.content, b.choices[0].message.content)
        checks.equal("a sampled chat with seed 1234 gives the same text streamed",
                     a.choices[0].message.content, c)
        checks.ok(a.usage.completion_tokens >= 1, "the sampled answer has tokens",
                  a.model_dump_json())

        m = server.wait_idle(checks, "after the requests")
        names = {k.split("{")[0] for k in m}
        checks.equal("/metrics has every metric the contract names", [],
                     sorted(METRICS - names))
        checks.ok(m.get("edgespec_mean_accept_length", 0) > 1.0,
                  f"the draft is used: edgespec_mean_accept_length "
                  f"{m.get('edgespec_mean_accept_length')} > 1")
        wide = sum(v for k, v in m.items()
                   if k.startswith("edgespec_verify_width_steps_total{") and 'width="1"' not in k)
        checks.ok(wide > 0, f"the width rule ran speculative steps (width > 1): {wide}")

        # SIGINT while a request streams: the server stops accepting, finishes the answer (the
        # same as generate's) and exits 0.
        prompt, n = COMPLETIONS[0]
        stream = client.completions.create(model=name, prompt=prompt, max_tokens=n,
                                           temperature=0, stream=True)
        text, finish, signalled = "", None, False
        for chunk in stream:
            for ch in chunk.choices:
                text += ch.text or ""
                finish = ch.finish_reason or finish
            if text and not signalled:
                server.proc.send_signal(signal.SIGINT)
                signalled = True
        rc = server.signal_and_wait(None)
        checks.equal("a stream running at SIGINT finishes in full (drain)",
                     (comp_refs[0]["text"], comp_refs[0]["finish_reason"]), (text, finish))
        checks.ok(rc == 0, f"the server exits 0 after SIGINT (got {rc})", server.tail(20))
    finally:
        server.stop(checks)
    checks.finish()


if __name__ == "__main__":
    main()
