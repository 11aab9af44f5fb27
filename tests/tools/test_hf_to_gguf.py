#!/usr/bin/env python3
"""tools/hf_to_gguf.py end to end on a tiny random Qwen3 (2 layers, hidden 256, vocab 151,936):
the GGUF it writes from the HF folder, converted back by `edgespec convert`, holds the folder's
tensors byte for byte; `edgespec generate` gives the same greedy tokens from the folder (with the
converted tokenizer.json) and from the GGUF. --llama-bench also runs llama.cpp on the GGUF.

The tokenizer comes from llama.cpp's ggml-vocab-qwen2.gguf: --vocab-gguf, else
$ES_TOKENIZER_VECTORS or <repo>/build-vectors/tokenizer (tools/fetch_tokenizer_vectors.sh);
without it the test exits 77 (skipped).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from checks import check

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(REPO, "tools", "hf_to_gguf.py")


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def write_shards(src, dst, theta):
    """A copy of folder `src` as two safetensors shards (with the index transformers writes)
    and a transformers-5 style config: rope_parameters instead of a top-level rope_theta."""
    path = os.path.join(src, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = tensors(path)
    names = sorted(data)
    os.makedirs(dst)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        head, off = {}, 0
        for k in part:
            head[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"],
                       "data_offsets": [off, off + len(data[k])]}
            off += len(data[k])
            weight_map[k] = fname
        text = json.dumps(head).encode()
        with open(os.path.join(dst, fname), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(data[k] for k in part))
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("rope_theta")
    cfg["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    if p.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)} -> {p.returncode}\n{p.stderr[-2000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--edgespec", required=True)
    ap.add_argument("--vocab-gguf")
    ap.add_argument("--llama-bench", help="llama-bench binary: also load and run the GGUF")
    a = ap.parse_args()
    vocab = a.vocab_gguf or os.path.join(
        os.environ.get("ES_TOKENIZER_VECTORS") or os.path.join(REPO, "build-vectors", "tokenizer"),
        "ggml-vocab-qwen2.gguf")
    if not os.path.isfile(vocab):
        print(f"SKIPPED: {vocab} is missing (tools/fetch_tokenizer_vectors.sh)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        hf, gguf, back = (os.path.join(tmp, n) for n in ("hf", "tiny.gguf", "back"))
        run([sys.executable, TOOL, "tiny-hf", hf, "--layers", "2", "--hidden", "256"])
        out = json.loads(run([sys.executable, TOOL, "convert", hf, gguf, "--vocab-gguf", vocab]))
        check(out["tensors"] == 1 + 2 * 11 + 2 and out["tokenizer_tokens"] == 151936,
              f"GGUF written: {out}")
        run([a.edgespec, "convert", gguf, back, "--dtype", "bf16", "-q"])
        t_hf, t_back = tensors(os.path.join(hf, "model.safetensors")), tensors(
            os.path.join(back, "model.safetensors"))
        check(set(t_hf) == set(t_back), f"same {len(t_hf)} tensor names after the round trip")
        check(all(t_hf[k] == t_back[k] for k in t_hf), "every tensor byte-identical")
        sharded, gguf2, back2 = (os.path.join(tmp, n) for n in ("sharded", "s.gguf", "back2"))
        write_shards(hf, sharded, 500000.0)
        run([sys.executable, TOOL, "convert", sharded, gguf2, "--vocab-gguf", vocab])
        run([a.edgespec, "convert", gguf2, back2, "--dtype", "bf16", "-q"])
        with open(os.path.join(back2, "config.json")) as f:
            theta = json.load(f)["rope_theta"]
        check(theta == 500000.0, f"rope_parameters.rope_theta carried: {theta}")
        check(tensors(os.path.join(back2, "model.safetensors")) == t_hf,
              "two shards: the same tensors as one file")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(back, name), hf)
        prompt = "the river of the city was green in the summer and the"
        tokens = {}
        for label, model in (("folder", hf), ("gguf", gguf)):
            res = json.loads(run([a.edgespec, "generate", "--model", model, "--backend", "cpu",
                                  "--raw", "-p", prompt, "-n", "24", "--json", "-q"]))
            tokens[label] = res["tokens"]
            check(len(res["tokens"]) == 24 and res["prompt_tokens"] == 12,
                  f"{label}: 12 prompt tokens (one a word), 24 generated")
        check(tokens["folder"] == tokens["gguf"], "greedy tokens: folder = GGUF")
        if a.llama_bench:
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(a.llama_bench))
            out = run([a.llama_bench, "-m", gguf, "-p", "16", "-n", "16", "-t", "1", "-r", "1"],
                      env=env)
            check("qwen3" in out and "tg16" in out, "llama-bench loads and runs the GGUF")
    print("test_hf_to_gguf: all checks passed")


if __name__ == "__main__":
    main()
