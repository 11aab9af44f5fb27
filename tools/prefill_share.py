#!/usr/bin/env python3
"""The whole-model prefill as a share of the bf16 GEMM peak (gpu_check.sh engine, prefill).

  prefill_share.py MODEL_DIR PREFILL_JSON PEAK_TFLOPS

MODEL_DIR: a Qwen3/Llama HF folder (config.json); PREFILL_JSON: `edgespec bench --json` output
with prompt_len and prefill_ms; PEAK_TFLOPS: the cuBLASLt square GEMM figure of the same call.
FLOPs counted: 2 * tokens * (the decoder layers' linear weights: q, k, v, o, gate, up, down;
embedding and lm_head excluded, as the prefill computes no logits but the last row's), plus
causal attention 4 * head_dim * heads per visible (query, key) pair, tokens * (tokens + 1) / 2
pairs per layer. Prints one line: TFLOP counted, TFLOP/s and the percentage of the peak.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, prefill_json, peak = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if peak <= 0:
        sys.exit(f"prefill_share: PEAK_TFLOPS = {peak} must be > 0")
    c = json.load(open(os.path.join(model_dir, "config.json")))
    r = json.load(open(prefill_json))
    h, layers, inter = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    heads, kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim") or h // heads
    t, ms = r["prompt_len"], r["prefill_ms"]
    per_layer = h * (heads + 2 * kv_heads) * d + heads * d * h + 3 * h * inter
    flops = 2.0 * t * per_layer * layers + layers * 4.0 * d * heads * t * (t + 1) / 2
    tflops = flops / (ms * 1e-3) / 1e12
    print(f"{flops / 1e12:.1f} TFLOP in {ms:.1f} ms = {tflops:.0f} TFLOP/s, "
          f"{100 * tflops / peak:.0f}% of the {peak:.1f} TFLOP/s GEMM peak")


if __name__ == "__main__":
    main()
