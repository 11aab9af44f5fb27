#!/usr/bin/env python3
"""tools/loadgen.py against stub OpenAI-compatible servers (standard library only, < 10 s).

Stub "edgespec": HTTP/1.1 chunked SSE, one token per chunk, usage in a final chunk, data: [DONE].
Stub "llama": llama-server's shape: the body ends when the connection closes, two tokens in
some chunks, no usage, timings.predicted_n in the last chunk. Stub "flaky": every fourth
request gets a 503. Checks the counts, the latency figures against the stubs' delays, that the
same seed gives the same prompts, and that errors are counted and fail the exit status.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from checks import check

FIRST_DELAY = 0.03  # seconds before the first token
TOKEN_DELAY = 0.004  # seconds between chunks


class Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "edgespec"
    seen = []  # (prompt, max_tokens, temperature, has seed) per request
    lock = threading.Lock()
    count = [0]

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b"edgespec_mean_accept_length 2.5\n" if self.path == "/metrics" else b"{}"
        status = 200 if self.path in ("/metrics", "/health") else 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        chat = self.path == "/v1/chat/completions"
        prompt = req["messages"][0]["content"] if chat else req["prompt"]
        with Stub.lock:
            Stub.seen.append((prompt, req["max_tokens"], req["temperature"], "seed" in req))
            Stub.count[0] += 1
            n = Stub.count[0]
        assert self.path == ("/v1/chat/completions" if Stub.mode == "chat" else "/v1/completions")
        assert req["stream"] is True
        if Stub.mode == "flaky" and n % 4 == 0:
            body = b'{"error":{"message":"busy","type":"overloaded_error"}}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        llama = Stub.mode == "llama"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if llama:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj):
            payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            data = b"data: " + payload + b"\n\n"
            if llama:
                self.wfile.write(data)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        time.sleep(FIRST_DELAY)
        left, i = req["max_tokens"], 0
        while left > 0:
            k = 2 if llama and i % 3 == 2 and left >= 2 else 1  # llama: some chunks carry two
            left -= k
            i += 1
            last = left == 0
            piece = {"delta": {"content": " tok" * k}} if chat else {"text": " tok" * k}
            chunk = {"choices": [{"index": 0, "finish_reason": "length" if last else None,
                                  **piece}]}
            if last and llama:
                chunk["timings"] = {"predicted_n": req["max_tokens"], "prompt_n": 7}
            send(chunk)
            if not last:
                time.sleep(TOKEN_DELAY)
        if not llama:
            n = req["max_tokens"]
            send({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n,
                                           "total_tokens": 7 + n}})
        send(b"[DONE]")
        if not llama:
            self.wfile.write(b"0\r\n\r\n")


def run_loadgen(loadgen, port, tmp, name, extra):
    out = os.path.join(tmp, name + ".json")
    md = os.path.join(tmp, name + ".md")
    cmd = [sys.executable, loadgen, "run", "--url", f"http://127.0.0.1:{port}", "--label", name,
           "--json", out, "--markdown", md, "-q"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    with open(out) as f:
        return p.returncode, json.load(f), open(md).read(), p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loadgen", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tools", "loadgen.py"))
    a = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    server.daemon_threads = True
    server.handle_error = lambda *args: None  # clients close kept-alive connections at will
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    common = ["--concurrency", "1,4", "--requests", "6,12", "--prompt-words", "16,32",
              "--max-tokens", "8,12"]
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("edgespec", "llama"):
            Stub.mode, Stub.seen = mode, []
            rc, rep, md, err = run_loadgen(a.loadgen, port, tmp, mode, common)
            check(rc == 0, f"{mode}: exit status 0 ({err.strip()[-300:]})")
            check([lv["concurrency"] for lv in rep["levels"]] == [1, 4], f"{mode}: two levels")
            check(len(Stub.seen) == 1 + 6 + 4 + 12, f"{mode}: warm-up 1 + 4, measured 6 + 12 sent")
            for lv in rep["levels"]:
                c = lv["concurrency"]
                check(lv["errors"] == 0, f"{mode} c={c}: no errors")
                measured = Stub.seen[1:7] if c == 1 else Stub.seen[11:]
                want = sum(m for _, m, _, _ in measured)
                check(lv["output_tokens"] == want, f"{mode} c={c}: {want} tokens counted")
                check(lv["ttft_ms"]["p50"] >= FIRST_DELAY * 1e3,
                      f"{mode} c={c}: ttft p50 {lv['ttft_ms']['p50']} >= {FIRST_DELAY * 1e3} ms")
                check(TOKEN_DELAY * 1e3 <= lv["itl_ms"]["p50"] < 10 * TOKEN_DELAY * 1e3,
                      f"{mode} c={c}: itl p50 {lv['itl_ms']['p50']} ms near {TOKEN_DELAY * 1e3}")
                check(lv["tpot_ms"]["p50"] > 0, f"{mode} c={c}: tpot p50 {lv['tpot_ms']['p50']}")
                check(lv["finish_reasons"] == {"length": lv["requests"]},
                      f"{mode} c={c}: finish reasons")
                check(lv.get("mean_accept_length") == 2.5, f"{mode} c={c}: tau from /metrics")
                check(lv["output_tok_s"] > 0 and lv["requests_s"] > 0, f"{mode} c={c}: rates")
            check(md.count("\n") == 4 and f"| {mode} | 4 | 12 | 0 |" in md, f"{mode}: markdown")
            check(all(t == 0 and not s for _, _, t, s in Stub.seen), f"{mode}: greedy, no seed")
            if mode == "edgespec":
                first_prompts = [p for p, _, _, _ in Stub.seen]
            else:  # the c=4 part arrives in any order
                check([p for p, _, _, _ in Stub.seen[:7]] == first_prompts[:7] and
                      sorted(p for p, _, _, _ in Stub.seen) == sorted(first_prompts),
                      "same seed: the same prompts as the first run")
        words = [len(p.split()) for p, _, _, _ in Stub.seen]
        check(set(words) <= {16, 32} and len(set(words)) == 2, "prompt lengths from the mix")
        Stub.mode, Stub.seen, Stub.count[0] = "flaky", [], 0
        rc, rep, md, err = run_loadgen(a.loadgen, port, tmp, "flaky",
                                       ["--concurrency", "2", "--requests", "8", "--max-tokens",
                                        "4", "--temperature", "0.7", "--warmup", "0"])
        lv = rep["levels"][0]
        check(rc == 1, "flaky: exit status 1 when requests fail")
        check(lv["errors"] == 2 and "HTTP 503" in lv["error_examples"][0],
              f"flaky: 2 of 8 errors counted ({lv['error_examples'][:1]})")
        check(lv["output_tokens"] == 6 * 4, "flaky: tokens of the 6 good requests")
        check(all(t == 0.7 and s for _, _, t, s in Stub.seen), "sampled: temperature and seed sent")
        prompts = os.path.join(tmp, "prompts.jsonl")
        with open(prompts, "w") as f:
            for text in ("Write a haiku.", "Name three rivers.", "Count to five."):
                f.write(json.dumps({"id": text[:4], "prompt": text}) + "\n")
        Stub.mode, Stub.seen = "chat", []
        rc, rep, md, err = run_loadgen(a.loadgen, port, tmp, "chat",
                                       ["--concurrency", "2", "--requests", "6", "--max-tokens",
                                        "5", "--endpoint", "chat", "--prompts-file", prompts])
        lv = rep["levels"][0]
        check(rc == 0 and lv["errors"] == 0 and lv["output_tokens"] == 6 * 5,
              f"chat: 6 requests of 5 tokens from delta.content ({err.strip()[-200:]})")
        check({p for p, _, _, _ in Stub.seen} <= {"Write a haiku.", "Name three rivers.",
                                                   "Count to five."}, "chat: prompts from the file")
        check(lv["ttft_ms"]["p50"] >= FIRST_DELAY * 1e3, "chat: ttft from the first delta")
        p = subprocess.run([sys.executable, a.loadgen, "table", os.path.join(tmp, "edgespec.json"),
                            os.path.join(tmp, "llama.json")], capture_output=True, text=True)
        check(p.returncode == 0 and p.stdout.count("\n") == 6, "table over two reports")
        p = subprocess.run([sys.executable, a.loadgen, "run", "--url", "http://127.0.0.1:1",
                            "--concurrency", "0"], capture_output=True, text=True)
        check(p.returncode != 0 and "--concurrency = '0'" in p.stderr, "bad --concurrency named")
    server.shutdown()
    print("test_loadgen: all checks passed")


if __name__ == "__main__":
    main()
