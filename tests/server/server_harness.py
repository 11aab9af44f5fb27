"""What every tests/server/test_*.py shares: the `edgespec serve` process (started on 127.0.0.1
with --port 0, its port read from the one "listening on" line), raw HTTP requests, /metrics, the
idle-and-no-leak check, `edgespec generate` as the reference answer, and a small check list that
prints a diff on mismatch and makes the script fail.

Each test file is a script: `python3 tests/server/test_X.py --edgespec build/edgespec`. Exit code
0: every check passed; 1: a check failed (each failure printed with its diff); 77: skipped (only
when the openai package is missing: CTest's SKIP_RETURN_CODE).
"""
import argparse
import collections
import difflib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

SKIP = 77
OPENAI_VERSION = "3.63.0"  # the pin tools/install_deps.sh installs
READY = re.compile(r"edgespec serve: listening on http://([^:\s]+):(\d+) \(model (.+)\)")
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--edgespec", required=True, help="the edgespec binary")
    return p.parse_args()


def require_openai():
    """The openai module; exits with SKIP (and says why) when it is not installed."""
    try:
        import openai
    except ImportError:
        print(f"SKIP: the Python package 'openai' is not installed; tools/install_deps.sh installs "
              f"it (python3 -m pip install openai=={OPENAI_VERSION})")
        sys.exit(SKIP)
    if openai.__version__ != OPENAI_VERSION:
        print(f"note: openai {openai.__version__} is installed; CI pins {OPENAI_VERSION}")
    return openai


def default_model_dirs():
    """The default model and its trained DFlash draft, where tools/fetch_default_model.sh puts
    them (the folders `edgespec generate` and `serve` load without --model)."""
    cache = os.environ.get("ES_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "edgespec")
    model = os.path.join(cache, "smollm2-135m-instruct")
    draft = os.path.join(cache, "smollm2-135m-instruct-dflash")
    for d in (model, draft):
        if not os.path.isfile(os.path.join(d, "config.json")):
            sys.exit(f"FAILED: {d} is missing; run: "
                     f"bash tools/fetch_default_model.sh build/edgespec")
    return model, draft


# ---------------------------------------------------------------------------------------------
# Checks: each failure is printed at once (with a diff where there are two values) and counted.

class Checks:
    def __init__(self, name):
        self.name = name
        self.failures = []
        self.passed = 0
        self.started = time.monotonic()

    def fail(self, what, detail=""):
        self.failures.append(what)
        print(f"FAIL: {what}" + (f"\n{detail}" if detail else ""), flush=True)

    def ok(self, cond, what, detail=""):
        if cond:
            self.passed += 1
        else:
            self.fail(what, detail)
        return cond

    def equal(self, what, expected, got):
        if expected == got:
            self.passed += 1
            return True
        self.fail(what, diff_text(expected, got))
        return False

    def finish(self):
        took = time.monotonic() - self.started
        if self.failures:
            print(f"{self.name}: {len(self.failures)} check(s) FAILED, {self.passed} passed "
                  f"({took:.1f} s):")
            for f in self.failures:
                print(f"  - {f}")
            sys.exit(1)
        if self.passed == 0:
            print(f"{self.name}: no check ran")
            sys.exit(1)
        print(f"{self.name}: all {self.passed} checks passed ({took:.1f} s)")
        sys.exit(0)


def diff_text(expected, got):
    """A readable difference: a unified diff of the two values' repr lines (long strings split
    on newlines), with both values in full underneath."""
    def lines(v):
        text = v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, default=str)
        return text.splitlines() or [""]
    d = "\n".join(difflib.unified_diff(lines(expected), lines(got), "expected", "got",
                                       lineterm=""))
    return f"{d}\n  expected: {expected!r}\n  got:      {got!r}"


# ---------------------------------------------------------------------------------------------
# The server process.

class Server:
    """`edgespec serve --backend cpu --host 127.0.0.1 --port 0 ARGS...` until stop()."""

    def __init__(self, edgespec, args):
        self.cmd = [edgespec, "serve", "--backend", "cpu", "--host", "127.0.0.1", "--port", "0",
                    *args]
        self.log = collections.deque(maxlen=400)  # the last stderr lines, for failures
        self.ready = threading.Event()
        self.host = self.port = self.model = None
        print("starting: " + " ".join(self.cmd), flush=True)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.reader.join(2)
                why = (f"exited with {self.proc.returncode}" if self.proc.poll() is not None
                       else f"not listening after {START_TIMEOUT_S} s")
                self.kill()
                sys.exit(f"FAILED: the server {why}; its output:\n" + self.tail())
        print(f"server ready on port {self.port} (model {self.model}) after "
              f"{time.monotonic() - self.started:.1f} s", flush=True)

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.append(line)
            m = READY.search(line)
            if m and not self.ready.is_set():
                self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
                self.ready.set()

    def tail(self, n=60):
        return "\n".join(list(self.log)[-n:])

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def rss_kib(self):
        """The server's resident set (VmRSS of /proc/PID/status), KiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def signal_and_wait(self, sig, timeout_s=STOP_TIMEOUT_S):
        """Sends `sig` (None: none, it was sent already) and waits for the exit; returns the exit
        code (None: still running after timeout_s, then killed). stop() is a no-op afterwards."""
        self.stopped = True
        if sig is not None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self.reader.join(5)
        return rc

    def stop(self, checks):
        """SIGTERM: the contract says the server drains and exits 0."""
        if getattr(self, "stopped", False):
            return
        if not self.alive():
            checks.fail(f"the server died before the end (exit {self.proc.returncode})",
                        self.tail())
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            checks.fail(f"the server did not exit within {STOP_TIMEOUT_S} s of SIGTERM",
                        self.tail())
            return
        self.reader.join(5)
        checks.ok(rc == 0, f"the server exits 0 on SIGTERM (got {rc})", self.tail())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # --- raw HTTP -------------------------------------------------------------------------------

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict, body bytes). `body`: bytes, str, or a JSON value."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode("utf-8")
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def post_json(self, path, body, timeout=120):
        """(status, parsed JSON body or None, raw bytes)."""
        status, _, raw = self.request("POST", path, body, timeout=timeout)
        try:
            return status, json.loads(raw), raw
        except ValueError:
            return status, None, raw

    def metrics(self):
        """GET /metrics as {"name" or 'name{label="v"}': value}."""
        status, _, raw = self.request("GET", "/metrics", timeout=30)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {raw[:200]!r}")
        return parse_prometheus(raw.decode("utf-8"))

    def wait_idle(self, checks, what, timeout_s=60):
        """Polls /metrics until no request runs or waits, then checks that every KV page is back:
        kv_pages_used == kv_pages_cached (the prefix cache's published pages only). Returns the
        metrics."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.metrics()
            idle = (m.get("edgespec_requests_running") == 0
                    and m.get("edgespec_requests_queued") == 0)
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        checks.ok(idle, f"{what}: the server is idle within {timeout_s} s "
                        f"(running {m.get('edgespec_requests_running')}, "
                        f"queued {m.get('edgespec_requests_queued')})")
        used, cached = m.get("edgespec_kv_pages_used"), m.get("edgespec_kv_pages_cached")
        checks.ok(used is not None and used == cached,
                  f"{what}: no KV page leaks once idle: kv_pages_used {used} == "
                  f"kv_pages_cached {cached}",
                  "metrics: " + json.dumps({k: v for k, v in m.items() if "kv_pages" in k}))
        return m


METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)")


def parse_prometheus(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if m:
            name = re.sub(r"\s+", "", m.group(1))
            out[name] = float(m.group(2))
    return out


def finished(metrics, reason):
    return metrics.get(f'edgespec_requests_total{{finish_reason="{reason}"}}', 0.0)


# ---------------------------------------------------------------------------------------------
# `edgespec generate`: the reference answers.

def generate(edgespec, model, entries, raw=False, stops=(), draft=None):
    """Runs `edgespec generate --json --one-at-a-time` on --input-file entries ({prompt, system?,
    max_new_tokens, temperature, ...}) and returns one dict per entry: text, tokens,
    prompt_tokens, finish_reason. `model` given: plain decoding unless `draft`."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(entries, f)
        path = f.name
    cmd = [edgespec, "generate", "--model", model, "--backend", "cpu", "--json",
           "--one-at-a-time", "--input-file", path, "-q"]
    if raw:
        cmd.append("--raw")
    for s in stops:
        cmd += ["--stop", s]
    if draft:
        cmd += ["--draft", draft]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    answers = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    if len(answers) != len(entries):
        sys.exit(f"FAILED: generate printed {len(answers)} answers for {len(entries)} requests")
    return answers


# ---------------------------------------------------------------------------------------------
# Raw sockets (disconnect tests).

def raw_request_bytes(host, port, path, body):
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    return head + data


def open_socket(server, timeout=30):
    s = socket.create_connection((server.host, server.port), timeout=timeout)
    return s


def abort_socket(s):
    """Closes with a TCP RST (SO_LINGER 0): an abrupt disconnect, not an orderly FIN."""
    import struct
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()
