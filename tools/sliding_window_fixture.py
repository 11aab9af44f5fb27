#!/usr/bin/env python3
"""Tiny sliding-window Qwen3 fixture (bounded sliding-window storage), with transformers as the
oracle. Runs on CPU (float32 compute, fixed seeds; torch, transformers, safetensors).

  python3 tools/sliding_window_fixture.py make-fixture tests/data/models/qwen3_swa
  python3 tools/sliding_window_fixture.py check tests/data/models/qwen3_swa

The model: Qwen3, 3 layers [full, sliding, sliding] (use_sliding_window, max_window_layers 1),
window 160 tokens (1.25 pages of 128), hidden 64, 2 query heads and 1 KV head of dim 64, vocab
256, random weights (tools/make_fixtures.py's perturb, final norm scaled by 0.15), saved in bf16 and reloaded in float32
with eager attention, as the other fixtures. Reference (reference.safetensors, f32):
  logits_a       [len(ROWS_A), V]   rows ROWS_A of prompt a (600 tokens: five pages)
  logits_b       [len(ROWS_B), V]   rows ROWS_B of prompt b (390 tokens)
  logits_a_full  [1, V]             row 599 of prompt a with every layer full attention (the same
                                    weights, use_sliding_window off): the window must matter
  decode_logits_a [STEPS, V]        logits of positions 600 ... 600 + STEPS - 1 when the fixed
                                    random continuation (reference.json "continuation") follows
                                    prompt a: what decode steps past the window must reproduce
                                    (teacher forced: this random model's greedy output repeats
                                    one token, which would test little)
reference.json: prompts, rows, continuation.
"""
import argparse
import json
import os
import sys

import torch

WINDOW = 160
LEN_A, LEN_B = 600, 390
ROWS_A = [0, 127, 128, 159, 160, 161, 255, 300, 455, 599]
ROWS_B = [150, 389]
STEPS = 60  # positions 600 ... 659: decode crosses the page boundary at 640
SEED = 4242


def config(sliding=True):
    from transformers import Qwen3Config
    return Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                       max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       use_sliding_window=sliding, sliding_window=WINDOW, max_window_layers=1)


def load(folder, sliding=True):
    from transformers import AutoModelForCausalLM
    if sliding:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager").eval()
    # The same weights with every layer full attention.
    model = AutoModelForCausalLM.from_config(config(sliding=False), attn_implementation="eager")
    from safetensors.torch import load_file
    state = {k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    model.load_state_dict(state, strict=False)  # tied lm_head is not stored
    model.tie_weights()
    return model.eval()


def prompts():
    g = torch.Generator().manual_seed(SEED + 1)
    return {"a": torch.randint(0, 256, (1, LEN_A), generator=g),
            "b": torch.randint(0, 256, (1, LEN_B), generator=g)}


def reference(folder):
    model = load(folder)
    assert model.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"], \
        model.config.layer_types
    ids = prompts()
    tensors, meta = {}, {"window": WINDOW, "rows": {"a": ROWS_A, "b": ROWS_B}, "prompts": {}}
    with torch.no_grad():
        for p, rows in (("a", ROWS_A), ("b", ROWS_B)):
            meta["prompts"][p] = ids[p][0].tolist()
            tensors[f"logits_{p}"] = model(ids[p]).logits[0, rows].float().contiguous()
        full = load(folder, sliding=False)
        tensors["logits_a_full"] = full(ids["a"]).logits[0, -1:].float().contiguous()
        g = torch.Generator().manual_seed(SEED + 2)
        cont = torch.randint(0, 256, (1, STEPS), generator=g)
        meta["continuation"] = cont[0].tolist()
        logits = model(torch.cat([ids["a"], cont], dim=1)).logits[0].float()
        tensors["decode_logits_a"] = logits[LEN_A:LEN_A + STEPS].contiguous()
    return tensors, meta


def make_fixture(out_dir):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_fixtures import perturb
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config(), attn_implementation="eager")
    perturb(model, seed=SEED)
    with torch.no_grad():
        # Flatter output distributions (top probability ~0.06 instead of ~1 after prompt a): the
        # engine tests sample, and a near one-hot model would emit one token whatever the context.
        model.model.norm.weight.mul_(0.15)
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    tensors, meta = reference(out_dir)
    save_file(tensors, os.path.join(out_dir, "reference.safetensors"))
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(meta, f)
    diff = float((tensors["logits_a"][-1] - tensors["logits_a_full"][0]).abs().max())
    print("ok", {k: list(v.shape) for k, v in tensors.items()},
          f"window vs full row 599: {diff:.4g}")
    return 0


def check(out_dir):
    from safetensors.torch import load_file
    tensors, meta = reference(out_dir)
    stored = load_file(os.path.join(out_dir, "reference.safetensors"))
    with open(os.path.join(out_dir, "reference.json")) as f:
        stored_meta = json.load(f)
    worst = max(float((tensors[k] - stored[k]).abs().max()) for k in tensors)
    same = meta == stored_meta
    print(f"max |recomputed - stored| = {worst:.3g}, tokens and prompts equal: {same}")
    return 0 if worst < 1e-4 and same else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["make-fixture", "check"])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    sys.exit(make_fixture(args.out_dir) if args.mode == "make-fixture" else check(args.out_dir))
