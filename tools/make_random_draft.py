#!/usr/bin/env python3
"""Writes a random DFlash draft (z-lab folder format) for a target model folder, for benchmarks.

    python3 tools/make_random_draft.py TARGET_DIR OUT_DIR [--layers 5] [--block-size 16]

The draft has the public DFlash shape for its target: the target's hidden size, heads, head dim
and intermediate size, `--layers` Qwen3 layers, `fc` over `--taps` evenly spaced target layers
(written explicitly as dflash_config.target_layer_ids), bf16 weights drawn N(0, 0.02) (norms 1).
It proposes noise (τ ≈ 1): it exists to time the draft's forward, not to accept tokens.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--taps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    with open(os.path.join(a.target, "config.json")) as f:
        t = json.load(f)
    hidden, n_layers = t["hidden_size"], t["num_hidden_layers"]
    heads, kv_heads = t["num_attention_heads"], t["num_key_value_heads"]
    head_dim = t.get("head_dim") or hidden // heads
    inter, vocab = t["intermediate_size"], t["vocab_size"]
    # Evenly spaced taps from layer 1 to n_layers - 3 (the reference code's default spacing).
    taps = sorted({round(1 + i * (n_layers - 4) / max(a.taps - 1, 1)) for i in range(a.taps)})

    g = torch.Generator().manual_seed(a.seed)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    w = {"fc.weight": rnd(hidden, len(taps) * hidden), "hidden_norm.weight": ones(hidden), "norm.weight": ones(hidden)}
    for i in range(a.layers):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = ones(hidden)
        w[p + "post_attention_layernorm.weight"] = ones(hidden)
        w[p + "self_attn.q_proj.weight"] = rnd(heads * head_dim, hidden)
        w[p + "self_attn.k_proj.weight"] = rnd(kv_heads * head_dim, hidden)
        w[p + "self_attn.v_proj.weight"] = rnd(kv_heads * head_dim, hidden)
        w[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * head_dim)
        w[p + "self_attn.q_norm.weight"] = ones(head_dim)
        w[p + "self_attn.k_norm.weight"] = ones(head_dim)
        w[p + "mlp.gate_proj.weight"] = rnd(inter, hidden)
        w[p + "mlp.up_proj.weight"] = rnd(inter, hidden)
        w[p + "mlp.down_proj.weight"] = rnd(hidden, inter)
    os.makedirs(a.out, exist_ok=True)
    save_file(w, os.path.join(a.out, "model.safetensors"))
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": a.layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": vocab,
        "max_position_embeddings": t.get("max_position_embeddings", 40960),
        "rms_norm_eps": t.get("rms_norm_eps", 1e-6), "rope_theta": t.get("rope_theta", 1000000.0),
        "attention_bias": False, "tie_word_embeddings": False, "block_size": a.block_size,
        "num_target_layers": n_layers, "torch_dtype": "bfloat16",
        "dflash_config": {"mask_token_id": vocab - 1, "target_layer_ids": taps},
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(json.dumps({"draft": a.out, "layers": a.layers, "block_size": a.block_size, "taps": taps}))


if __name__ == "__main__":
    main()
