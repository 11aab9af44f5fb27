#!/usr/bin/env python3
"""Bad requests against `edgespec serve` (default model, CPU backend): a table of malformed
bodies, wrong types and out-of-range values per field, unsupported fields and values, bad routes
and methods, an oversize body, a prompt over the context and a full queue. Each must get its
status code and an OpenAI-style error object {"error": {"message", "type", "param", "code"}}
whose message names the field (and, for a range, the limit); after each one a good request still
answers; at the end /metrics counts the errors by status and no KV page is held.

Raw HTTP (http.client), not the openai client: the client refuses or rewrites many of these
requests before they are sent.
"""
import http.client
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
CHAT_OK = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
COMP_OK = {"prompt": "Hi", "max_tokens": 2, "temperature": 0}
BODY_LIMIT = 1 << 20  # the default --max-body-bytes
INVALID = "invalid_request_error"
NOT_FOUND = "not_found_error"


def chat(**changes):
    return {**CHAT_OK, **changes}


def comp(**changes):
    return {**COMP_OK, **changes}


def without(body, key):
    return {k: v for k, v in body.items() if k != key}


# Each row: id, method, path, body (a JSON value, or bytes sent as they are), expected status,
# error type (None: any non-empty string; the contract names none for 405 and 413), code (None:
# not checked), fragments the message must contain (each a string or a tuple of alternatives,
# case-insensitive), param (None: not checked).
ROWS = [
    # The body itself.
    ("json.malformed", "POST", COMP, b'{"prompt": "Hi",', 400, INVALID, None, [("json",)], None),
    ("json.not_object", "POST", COMP, b"[1, 2]", 400, INVALID, None, [("object", "json")], None),
    ("json.empty_body", "POST", CHAT, b"", 400, INVALID, None, [("json", "body", "messages")],
     None),
    ("json.bad_utf8", "POST", COMP, b'{"prompt": "\xff\xfe", "max_tokens": 2}', 400, INVALID,
     None, [("utf-8", "utf8", "json", "prompt")], None),
    # Wrong JSON types, one per field.
    ("type.prompt", "POST", COMP, comp(prompt=42), 400, INVALID, None, ["prompt"], None),
    ("type.max_tokens", "POST", COMP, comp(max_tokens="10"), 400, INVALID, None, ["max_tokens"],
     None),
    ("type.max_tokens_float", "POST", COMP, comp(max_tokens=1.5), 400, INVALID, None,
     ["max_tokens"], None),
    ("type.temperature", "POST", CHAT, chat(temperature="hot"), 400, INVALID, None,
     ["temperature"], None),
    ("type.top_p", "POST", CHAT, chat(top_p=[0.5]), 400, INVALID, None, ["top_p"], None),
    ("type.top_k", "POST", COMP, comp(top_k=2.5), 400, INVALID, None, ["top_k"], None),
    ("type.seed", "POST", COMP, comp(seed=1.5), 400, INVALID, None, ["seed"], None),
    ("type.stream", "POST", COMP, comp(stream="yes"), 400, INVALID, None, ["stream"], None),
    ("type.stream_options", "POST", CHAT, chat(stream=True, stream_options={"include_usage": 1}),
     400, INVALID, None, [("include_usage", "stream_options")], None),
    ("type.stop", "POST", COMP, comp(stop=42), 400, INVALID, None, ["stop"], None),
    ("type.stop_item", "POST", COMP, comp(stop=["a", 7]), 400, INVALID, None, ["stop"], None),
    ("type.messages", "POST", CHAT, chat(messages="Hi"), 400, INVALID, None, ["messages"], None),
    ("type.content", "POST", CHAT, chat(messages=[{"role": "user", "content": 42}]), 400,
     INVALID, None, ["content"], None),
    ("type.model", "POST", COMP, comp(model=7), 400, INVALID, None, ["model"], None),
    # Out of range: the message names the field and its limit (runtime/request_settings).
    ("range.max_tokens_0", "POST", COMP, comp(max_tokens=0), 400, INVALID, None,
     ["max_tokens"], None),
    ("range.max_tokens_neg", "POST", CHAT, chat(max_tokens=-5), 400, INVALID, None,
     ["max_tokens"], None),
    ("range.max_tokens_huge", "POST", COMP, comp(max_tokens=1 << 40), 400, INVALID, None,
     ["max_tokens"], None),
    ("range.temperature_neg", "POST", COMP, comp(temperature=-0.5), 400, INVALID, None,
     ["temperature"], None),
    ("range.temperature_high", "POST", CHAT, chat(temperature=101), 400, INVALID, None,
     ["temperature", "100"], None),
    ("range.top_p_0", "POST", COMP, comp(top_p=0), 400, INVALID, None, ["top_p"], None),
    ("range.top_p_high", "POST", CHAT, chat(top_p=1.5), 400, INVALID, None, ["top_p"], None),
    ("range.top_k_neg", "POST", COMP, comp(top_k=-1), 400, INVALID, None, ["top_k"], None),
    ("range.top_k_high", "POST", COMP, comp(top_k=(1 << 20) + 1), 400, INVALID, None,
     ["top_k", "1048576"], None),
    ("range.seed_neg", "POST", COMP, comp(seed=-1), 400, INVALID, None, ["seed"], None),
    ("range.seed_2_64", "POST", CHAT, chat(seed=1 << 64), 400, INVALID, None, ["seed"], None),
    # Values the server does not support.
    ("value.n_2", "POST", CHAT, chat(n=2), 400, INVALID, None, ["n"], None),
    ("value.stop_5", "POST", COMP, comp(stop=["a", "b", "c", "d", "e"]), 400, INVALID, None,
     ["stop", "4"], None),
    ("value.stop_empty", "POST", COMP, comp(stop=[""]), 400, INVALID, None, ["stop"], None),
    ("value.max_tokens_pair", "POST", CHAT, chat(max_tokens=4, max_completion_tokens=8), 400,
     INVALID, None, [("max_completion_tokens", "max_tokens")], None),
    # Unsupported fields: named in the message and in param.
    ("field.logprobs", "POST", CHAT, chat(logprobs=True), 400, INVALID, None,
     ["unsupported field 'logprobs'"], "logprobs"),
    ("field.tools", "POST", CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}]),
     400, INVALID, None, ["'tools'"], "tools"),
    ("field.logit_bias", "POST", COMP, comp(logit_bias={"50256": -100}), 400, INVALID, None,
     ["'logit_bias'"], "logit_bias"),
    ("field.frequency_penalty", "POST", COMP, comp(frequency_penalty=0.5), 400, INVALID, None,
     ["'frequency_penalty'"], "frequency_penalty"),
    ("field.messages_on_completions", "POST", COMP, comp(messages=CHAT_OK["messages"]), 400,
     INVALID, None, ["'messages'"], "messages"),
    # Messages and prompts.
    ("chat.messages_empty", "POST", CHAT, chat(messages=[]), 400, INVALID, None, ["messages"],
     None),
    ("chat.messages_missing", "POST", CHAT, without(CHAT_OK, "messages"), 400, INVALID, None,
     ["messages"], None),
    ("chat.role_bad", "POST", CHAT, chat(messages=[{"role": "robot", "content": "Hi"}]), 400,
     INVALID, None, ["role"], None),
    ("chat.role_missing", "POST", CHAT, chat(messages=[{"content": "Hi"}]), 400, INVALID, None,
     ["role"], None),
    ("chat.content_part_image", "POST", CHAT,
     chat(messages=[{"role": "user", "content": [{"type": "image_url",
                                                   "image_url": {"url": "http://x/y.png"}}]}]),
     400, INVALID, None, [("type", "image_url", "content")], None),
    ("prompt.missing", "POST", COMP, without(COMP_OK, "prompt"), 400, INVALID, None, ["prompt"],
     None),
    ("prompt.list_of_2", "POST", COMP, comp(prompt=["Hi", "there"]), 400, INVALID, None,
     ["prompt"], None),
    ("prompt.token_ids", "POST", COMP, comp(prompt=[1, 2, 3]), 400, INVALID, None, ["prompt"],
     None),
    ("prompt.over_context", "POST", COMP, comp(prompt="hello " * 20000), 400, INVALID,
     "context_length_exceeded", [("prompt", "context")], None),
    ("size.oversize_body", "POST", COMP, None, 413, None, None, [], None),  # body built below
    # Routes, methods and the model.
    ("route.unknown", "GET", "/v1/nothing", None, 404, NOT_FOUND, None, [], None),
    ("route.unknown_post", "POST", "/v2/completions", COMP_OK, 404, NOT_FOUND, None, [], None),
    ("method.get_completions", "GET", COMP, None, 405, None, None, [], None),
    ("method.get_chat", "GET", CHAT, None, 405, None, None, [], None),
    ("method.post_models", "POST", "/v1/models", {}, 405, None, None, [], None),
    ("method.delete_health", "DELETE", "/health", None, 405, None, None, [], None),
    ("model.unknown", "POST", CHAT, chat(model="gpt-4-unknown"), 404, NOT_FOUND,
     "model_not_found", ["gpt-4-unknown"], "model"),
]


def oversize_body():
    """A valid request just over the default body limit (1 MiB)."""
    return json.dumps(comp(prompt="a" * (BODY_LIMIT + 16))).encode()


def send_oversize(server, body):
    """(status, body) of a request whose body is over the limit. The server may answer and close
    before it has read it all, so the body is written in pieces and a failed write is not an
    error; the answer is read from what came back."""
    s = socket.create_connection((server.host, server.port), timeout=60)
    head = (f"POST {COMP} HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        s.sendall(head)
        for i in range(0, len(body), 65536):
            s.sendall(body[i:i + 65536])
    except OSError:
        pass
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        return None, data[:300]
    return status, rest


def error_object(raw):
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or not all(k in err for k in ("message", "type", "param",
                                                               "code")):
        return None
    return err


def check_row(server, checks, row):
    rid, method, path, body, status, etype, code, fragments, param = row
    if rid == "size.oversize_body":
        got, raw = send_oversize(server, oversize_body())
    else:
        try:
            got, _, raw = server.request(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            checks.fail(f"{rid}: {method} {path}: no answer ({type(e).__name__}: {e})",
                        server.tail(10))
            return
    err = error_object(raw or b"")
    detail = f"body: {(raw or b'')[:400]!r}"
    checks.equal(f"{rid}: {method} {path}: status", status, got)
    if not checks.ok(err is not None, f"{rid}: the answer is an error object "
                                      f"{{error: {{message, type, param, code}}}}", detail):
        return
    if etype is None:
        checks.ok(isinstance(err["type"], str) and err["type"], f"{rid}: error.type is set",
                  detail)
    else:
        checks.equal(f"{rid}: error.type", etype, err["type"])
    if code is not None:
        checks.equal(f"{rid}: error.code", code, err["code"])
    if param is not None:
        checks.equal(f"{rid}: error.param", param, err["param"])
    message = str(err["message"]).lower()
    for f in fragments:
        alternatives = (f,) if isinstance(f, str) else f
        checks.ok(any(a.lower() in message for a in alternatives),
                  f"{rid}: the message names {' or '.join(map(repr, alternatives))}", detail)


def good_request(server, checks, after):
    try:
        status, doc, raw = server.post_json(COMP, COMP_OK)
    except (OSError, http.client.HTTPException) as e:
        checks.fail(f"a good request after {after}: no answer ({e})", server.tail(20))
        return
    checks.ok(status == 200 and doc and doc["usage"]["completion_tokens"] >= 1,
              f"a good request answers after {after}", f"{status} {raw[:300]!r}")


def overload(server, checks):
    """--max-batch 2 --max-queued 2: of 8 long requests sent at once, 2 run, 2 wait and the rest
    are turned away with 503 overloaded_error / server_overloaded; the others answer in full."""
    results = [None] * 8

    def send(i):
        try:
            results[i] = server.post_json(COMP, comp(prompt=f"Story {i}:", max_tokens=48))
        except (OSError, http.client.HTTPException) as e:
            results[i] = (None, None, repr(e).encode())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    statuses = [r[0] for r in results]
    checks.ok(statuses.count(503) >= 1 and statuses.count(200) >= 2
              and all(s in (200, 503) for s in statuses),
              f"a full queue: some requests get 503, the rest 200 (got {statuses})")
    for status, doc, raw in results:
        if status == 503:
            err = error_object(raw) or {}
            checks.equal("503: error type and code", ("overloaded_error", "server_overloaded"),
                         (err.get("type"), err.get("code")))
        elif status == 200:
            finish, n = doc["choices"][0]["finish_reason"], doc["usage"]["completion_tokens"]
            checks.ok(finish == "length" and n == 48 or finish == "stop" and 1 <= n <= 48,
                      f"an accepted request under overload answers in full ({finish}, {n} "
                      f"tokens of 48)", raw[:300])
    return statuses.count(503)


def main():
    args = h.parse_args(__doc__)
    checks = h.Checks("server_bad_requests")
    checks.ok(len(ROWS) >= 25, f"the table has at least 25 kinds ({len(ROWS)})")
    server = h.Server(args.edgespec, ["--max-batch", "2", "--max-queued", "2"])
    try:
        m0 = server.metrics()
        for row in ROWS:
            check_row(server, checks, row)
            good_request(server, checks, row[0])
        rejected = overload(server, checks)
        good_request(server, checks, "the overload")
        m1 = server.wait_idle(checks, "after the bad requests")
        want = {}
        for row in ROWS:
            want[row[4]] = want.get(row[4], 0) + 1
        want[503] = rejected
        got = {s: m1.get(f'edgespec_request_errors_total{{status="{s}"}}', 0)
               - m0.get(f'edgespec_request_errors_total{{status="{s}"}}', 0) for s in want}
        checks.equal("edgespec_request_errors_total counts each bad request by status",
                     {str(k): float(v) for k, v in want.items()},
                     {str(k): float(v) for k, v in got.items()})
    finally:
        server.stop(checks)
    checks.finish()


if __name__ == "__main__":
    main()
