#!/usr/bin/env python3
"""A plain-decode benchmark's step time against the memory roofline: the bytes a step must read
(weights + KV) at the measured read-stream ceiling (gpu_check.sh engine, batch16 / batch64).

    python3 tools/decode_roofline.py --model DIR --bench BENCH.json --ceiling TBPS

DIR is the Hugging Face folder the benchmark ran (config.json + *.safetensors), BENCH.json the
output of `edgespec bench --json` (plain decode: batch, prompt_len, gen_len, plain_tok_s,
plain_step_ms), TBPS the read-stream ceiling measured in the same call (bench_linear_gpu
--ceiling). Bytes one decode step must read:
  weights  every tensor of the safetensors files except the input embedding table, of which a
           step reads only `batch` rows (when the embeddings are tied, the table is the lm_head
           and counts once);
  KV       every sequence reads K and V of its whole context in every layer: layers x context x
           kv_heads x head_dim x 2 x 2 bytes (bf16), at the mean context of the timed steps
           (prompt_len + gen_len / 2).
Roofline step time = bytes / ceiling; the fraction is that over the measured step time.
Prints one line of key=value pairs. Stdlib only."""
import argparse
import glob
import json
import os
import struct
import sys

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}


def tensor_bytes(folder):
    """{name: bytes} over every *.safetensors file in folder (from their headers alone)."""
    sizes = {}
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        sys.exit(f"decode_roofline: no *.safetensors in {folder}")
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            if info["dtype"] not in DTYPE_BYTES:
                sys.exit(f"decode_roofline: {path}: tensor {name} has unknown dtype {info['dtype']}")
            sizes[name] = end - begin
    return sizes


def step_bytes(config, sizes, batch, context):
    tied = bool(config.get("tie_word_embeddings", False))
    embed = "model.embed_tokens.weight"
    weights = sum(b for name, b in sizes.items() if name != embed or tied)
    if embed in sizes and not tied:
        hidden = int(config["hidden_size"])
        weights += batch * hidden * 2  # the rows a step gathers
    layers = int(config["num_hidden_layers"])
    kv_heads = int(config.get("num_key_value_heads", config["num_attention_heads"]))
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
    kv = batch * layers * context * kv_heads * head_dim * 2 * 2
    return weights, kv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--ceiling", type=float, required=True, help="read-stream ceiling, TB/s")
    args = ap.parse_args()
    if args.ceiling <= 0:
        sys.exit(f"decode_roofline: --ceiling {args.ceiling} must be > 0")
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    with open(args.bench) as f:
        bench = json.load(f)
    for key in ("batch", "prompt_len", "gen_len", "plain_tok_s", "plain_step_ms"):
        if key not in bench:
            sys.exit(f"decode_roofline: {args.bench} has no '{key}' (a plain edgespec bench --json?)")
    batch = int(bench["batch"])
    context = int(bench["prompt_len"]) + int(bench["gen_len"]) / 2
    weights, kv = step_bytes(config, tensor_bytes(args.model), batch, context)
    roofline_ms = (weights + kv) / (args.ceiling * 1e12) * 1e3
    step_ms = float(bench["plain_step_ms"])
    print(f"batch={batch} tok_s={bench['plain_tok_s']:.1f} step_ms={step_ms:.3f} weights_gb={weights / 1e9:.2f} "
          f"kv_gb={kv / 1e9:.2f} mean_context={context:.0f} ceiling_tbps={args.ceiling:.2f} "
          f"roofline_step_ms={roofline_ms:.3f} fraction_of_roofline={roofline_ms / step_ms:.3f} "
          f"effective_tbps={(weights + kv) / (step_ms * 1e-3) / 1e12:.2f}")


if __name__ == "__main__":
    main()
