#!/usr/bin/env python3
"""Builds the tiny random-weight model fixtures of tests/data/models on the GPU machine, with its
transformers as the oracle.

For each family (Qwen3 with default RoPE, Llama with llama3 RoPE scaling, GQA group 3 and tied
embeddings, Qwen2 with qkv bias and YaRN) it writes an HF folder (config.json + bf16
model.safetensors) and the reference outputs of transformers, computed in float32 from the same
bf16-rounded weights with eager attention:
  reference.json         prompts, greedy continuations, shapes
  reference.safetensors  f32 tensors:
    logits_<p>    [len, vocab]  logits of every prompt position
    taps_<p>      [layers, len, hidden]  each decoder layer's output (before the final norm)
    greedy_logits_<p> [steps, vocab]  logits that chose each greedy token
  for prompts p = a (20 tokens), b (7 tokens), long (300 tokens; logits of the last row only).

  python3 tools/make_fixtures.py OUT_DIR
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

STEPS = 17  # 16 verify rows after the first greedy token


def perturb(model, seed):
    # transformers initialises biases to zero and norms to one: randomise everything so that every
    # weight matters to the logits.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif "embed" in name or "lm_head" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.08 * noise)


def families():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    common = dict(vocab_size=384, max_position_embeddings=1024, rms_norm_eps=1e-6)
    return {
        "qwen3": (Qwen3Config, dict(hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                    tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                    **common)),
        "llama": (LlamaConfig, dict(hidden_size=192, intermediate_size=256, num_hidden_layers=2,
                                    num_attention_heads=3, num_key_value_heads=1, head_dim=64,
                                    tie_word_embeddings=True,
                                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                     "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 64},
                                    **common)),
        "qwen2": (Qwen2Config, dict(hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1,
                                    tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                     "factor": 4.0,
                                                     "original_max_position_embeddings": 64},
                                    **common)),
    }


def layer_outputs(model, ids):
    taps = []
    hooks = [layer.register_forward_hook(
        lambda _m, _i, out: taps.append((out[0] if isinstance(out, tuple) else out).detach()))
        for layer in model.model.layers]
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    for h in hooks:
        h.remove()
    return logits, torch.stack([t[0].float() for t in taps])


def greedy(model, ids):
    tokens, step_logits = [], []
    cur = ids
    with torch.no_grad():
        for _ in range(STEPS):  # no KV cache: every step is a full forward, the plainest oracle
            logits = model(cur).logits[0, -1].float()
            nxt = int(torch.argmax(logits))
            tokens.append(nxt)
            step_logits.append(logits)
            cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
    return tokens, torch.stack(step_logits)


def main(out_dir):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    for index, (name, (config_class, kwargs)) in enumerate(families().items()):
        config = config_class(**kwargs)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        perturb(model, seed=100 + index)
        folder = os.path.join(out_dir, name)
        model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        # Reload the saved folder in float32, as a user would: casting the live model back would
        # also keep its RoPE inv_freq buffer rounded to bf16 by the cast above.
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        g = torch.Generator().manual_seed(7 + index)
        prompts = {"a": torch.randint(0, config.vocab_size, (1, 20), generator=g),
                   "b": torch.randint(0, config.vocab_size, (1, 7), generator=g),
                   "long": torch.randint(0, config.vocab_size, (1, 300), generator=g)}
        tensors, meta = {}, {"family": name, "steps": STEPS, "prompts": {}, "greedy": {}}
        for p, ids in prompts.items():
            logits, taps = layer_outputs(model, ids)
            meta["prompts"][p] = ids[0].tolist()
            if p == "long":
                tensors["logits_long_last"] = logits[-1:].contiguous()
                continue
            tensors[f"logits_{p}"] = logits.contiguous()
            tensors[f"taps_{p}"] = taps.contiguous()
            tokens, step_logits = greedy(model, ids)
            meta["greedy"][p] = tokens
            tensors[f"greedy_logits_{p}"] = step_logits.contiguous()
        save_file(tensors, os.path.join(folder, "reference.safetensors"))
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(meta, f)
        print(name, "ok", {k: list(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main(sys.argv[1])
