#!/usr/bin/env python3
"""PyTorch oracle of the DFlash draft forward (spec §5) and its committed test fixture.

Written from the spec, not from src/model/dflash_draft.cpp: transformers' Qwen3 pieces where they
fit (Qwen3RMSNorm, Qwen3MLP, Qwen3RotaryEmbedding, apply_rotary_pos_emb), the DFlash attention
written out. The target is transformers' own Qwen3ForCausalLM.

  draft forward for a block at positions T … T+BS−1 of one sequence, context = positions 0 … T−1:
    taps      output of target layer i (residual stream after layer i, before the final norm) for
              every i in dflash_config.target_layer_ids: transformers' hidden_states[i + 1] for
              i < L−1; for the last layer hidden_states[L] is already final-normed, so that one
              is read with a forward hook on the layer (every tap is cross-checked against a hook)
    ctx       hidden_norm(fc(concat taps in fc order))                            [T, H]
    per layer context K = RoPE_pos(k_norm(k_proj(ctx))), V = v_proj(ctx), positions 0 … T−1
    block     h = [emb(anchor), m × (BS−1)], m = the draft's mask_embedding if it ships one, else
              row mask_token_id of the target's embedding table; positions T … T+BS−1
    per layer x = input_layernorm(h); q/k = RoPE(q_norm/k_norm(q_proj/k_proj(x))), v = v_proj(x);
              attention of the BS queries over [context K/V ; block K/V], no mask, GQA, scale
              1/sqrt(D); h += o_proj(attn); h += mlp(post_attention_layernorm(h))
    logits    target lm_head(norm(h))  [BS, V]; row i predicts the token at position T + i
  The draft's RoPE comes from the draft's own config (z-lab builds rotary_emb from it).

Modes (run on CPU, float32 compute, deterministic seeds; torch, transformers, safetensors, numpy):

  python3 tools/dflash_reference.py make-fixture tests/data/models/dflash_tiny
      writes OUT/target (HF Qwen3 folder, bf16), OUT/draft (z-lab DFlashDraftModel folder, bf16)
      and the reference of a fixed two-round scenario, then re-checks it from the saved files:
        reference.json         configuration summary, per sequence the prompt, the verify tokens
                               and the accepted count; per round block starts, anchors, argmax
                               [B][BS] and the f32 top-1/top-2 margins of every row
        reference.safetensors  f32: logits_round{0,1} [B, BS, V]; taps_seq{b} [taps, T_b, H], the
                               tapped target outputs of every committed token of sequence b
                               (T_b = prompt + anchor + accepted), rows 0 … prompt−1 are round 0's
                               context, all of them round 1's
  python3 tools/dflash_reference.py check tests/data/models/dflash_tiny
      recomputes everything from the saved folders and compares with the stored reference.

Scenario (batch of 2, sequence b on page-table row b, pages of 128 tokens):
  round 0  prefill prompts of 150 and 123 tokens (the first crosses a page boundary); anchor =
           target greedy token after the prompt; context = every prompt token; block at T = prompt
  round 1  the target verifies [anchor, 7 fixed tokens] at positions prompt … prompt+7; 2 resp. 7
           of the fixed tokens are accepted (rows 3 … 7 of sequence 0 rejected; sequence 1's
           accepted rows 123 … 130 cross a page boundary); context += the accepted rows; anchor =
           the target's greedy token after them (the bonus); block at T = prompt + 1 + accepted.
  The oracle is stateless: each round recomputes the draft's context K/V from all committed taps.
"""
import argparse
import json
import math
import os
import sys

# ---- The fixture's shapes and scenario. ----

BLOCK_SIZE = 8
TAPS = [1, 3]              # the target's last layer (3) too: its tap must be pre-final-norm
MASK_TOKEN_ID = 511        # the last row of the target's table (a spare row, as in Qwen3's vocab)
PROMPT_LENGTHS = [150, 123]
ACCEPTED = [2, 7]          # fixed tokens accepted in round 1 (of BLOCK_SIZE - 1)
TARGET_SEED, DRAFT_SEED, SCENARIO_SEED = 1000, 2000, 3000
MAX_FIXTURE_BYTES = 2 * 1024 * 1024

# Head dim 64: the runtime's attention kernels take 64, 128 and 256.
TARGET_DIMS = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=False)
TARGET_ROPE_THETA = 10000.0


def draft_config():
    """The draft's config.json, in the z-lab format (transformers 4.x dialect, as published).
    Its own heads (4 q / 1 kv), MLP width and RoPE theta differ from the target's on purpose."""
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": BLOCK_SIZE,
        "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": list(TAPS)},
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": TARGET_DIMS["hidden_size"],
        "intermediate_size": 96,
        "layer_types": ["full_attention", "full_attention"],
        "max_position_embeddings": 1024,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 1,
        "num_target_layers": TARGET_DIMS["num_hidden_layers"],
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 50000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": TARGET_DIMS["vocab_size"],
    }


def top2_margin(row):
    """top-1 minus top-2 of a list of floats."""
    a, b = sorted(row, reverse=True)[:2]
    return float(a - b)


def fixture_bytes(out_dir):
    total = 0
    for root, _dirs, files in os.walk(out_dir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


# ---- transformers glue. ----

def qwen3_config(dims, rope_theta):
    """A Qwen3Config with default RoPE at `rope_theta`, in the dialect of the installed
    transformers (5.x: rope_parameters; 4.x: rope_theta). The caller checks the resulting
    inverse frequencies, so a dialect mix-up cannot pass silently."""
    import transformers
    from transformers import Qwen3Config
    if int(transformers.__version__.split(".")[0]) >= 5:
        return Qwen3Config(**dims, rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    return Qwen3Config(**dims, rope_theta=rope_theta, rope_scaling=None)


def check_rotary(rotary, theta, head_dim, what):
    """inv_freq must be transformers' default: 1 / theta ** (arange(0, D, 2) / D), in float32."""
    import torch
    want = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    got = rotary.inv_freq.detach().float().cpu()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-6, atol=0.0):
        raise SystemExit(f"{what}: rotary inv_freq is not the default RoPE at theta {theta}: {got[:4]} …")
    if float(getattr(rotary, "attention_scaling", 1.0)) != 1.0:
        raise SystemExit(f"{what}: rotary attention_scaling != 1")


def check_apply_rotary():
    """apply_rotary_pos_emb must be the NeoX rotation of spec §2.1 (guards against a hub kernel
    or an API change): k'[i] = k[i] cos[i] − k[i+h] sin[i], k'[i+h] = k[i+h] cos[i] + k[i] sin[i]."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 2, 3, 8, generator=g)
    ang = torch.randn(1, 3, 4, generator=g)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    got, _ = apply_rotary_pos_emb(x, x, cos, sin)
    x1, x2 = x[..., :4], x[..., 4:]
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    want = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    if not torch.allclose(got, want, rtol=1e-6, atol=1e-6):
        raise SystemExit("apply_rotary_pos_emb is not the NeoX rotation")


def perturb_target(model, seed):
    # The fixtures' randomisation (transformers initialises norms to one): every weight matters.
    from make_fixtures import perturb
    perturb(model, seed)


def make_target(folder):
    import torch
    from transformers import AutoModelForCausalLM
    config = qwen3_config(TARGET_DIMS, TARGET_ROPE_THETA)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    perturb_target(model, TARGET_SEED)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)


def load_target(folder):
    """The saved folder reloaded in float32 (a live model cast to bf16 and back would keep a
    bf16-rounded inv_freq, see make_fixtures.py)."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    c = model.config
    check_rotary(model.model.rotary_emb, TARGET_ROPE_THETA, c.head_dim, "target")
    return model


def make_draft(folder):
    """Random draft weights (rounded to bf16 on disk) and the z-lab config.json."""
    import torch
    from safetensors.torch import save_file
    cfg = draft_config()
    H, D, I = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    Hq, Hkv, n = cfg["num_attention_heads"], cfg["num_key_value_heads"], len(TAPS)
    g = torch.Generator().manual_seed(DRAFT_SEED)

    def randn(shape, std, mean=0.0):
        return mean + std * torch.randn(shape, generator=g)

    w = {"fc.weight": randn((H, n * H), 1 / math.sqrt(n * H)),
         "hidden_norm.weight": randn((H,), 0.2, 1.0),
         "norm.weight": randn((H,), 0.2, 1.0)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        w[p + "input_layernorm.weight"] = randn((H,), 0.2, 1.0)
        w[p + "post_attention_layernorm.weight"] = randn((H,), 0.2, 1.0)
        w[p + "self_attn.q_proj.weight"] = randn((Hq * D, H), 1 / math.sqrt(H))
        w[p + "self_attn.k_proj.weight"] = randn((Hkv * D, H), 1 / math.sqrt(H))
        w[p + "self_attn.v_proj.weight"] = randn((Hkv * D, H), 1 / math.sqrt(H))
        w[p + "self_attn.o_proj.weight"] = randn((H, Hq * D), 1 / math.sqrt(Hq * D))
        w[p + "self_attn.q_norm.weight"] = randn((D,), 0.2, 1.0)
        w[p + "self_attn.k_norm.weight"] = randn((D,), 0.2, 1.0)
        w[p + "mlp.gate_proj.weight"] = randn((I, H), 1 / math.sqrt(H))
        w[p + "mlp.up_proj.weight"] = randn((I, H), 1 / math.sqrt(H))
        w[p + "mlp.down_proj.weight"] = randn((H, I), 1 / math.sqrt(I))
    os.makedirs(folder, exist_ok=True)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()},
              os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


# ---- The target: logits and tapped layer outputs. ----

def target_forward(model, ids, taps):
    """logits [T, V] and the taps [n, T, H] (float32) of one sequence, run from scratch."""
    import torch
    L = model.config.num_hidden_layers
    hooked = {}

    def hook(i):
        def save(_module, _inputs, out):
            hooked[i] = (out[0] if isinstance(out, tuple) else out).detach()
        return save

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(model.model.layers)]
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    hs = out.hidden_states
    if len(hs) != L + 1 or len(hooked) != L:
        raise SystemExit(f"expected {L + 1} hidden states and {L} hooked layers, got {len(hs)}, {len(hooked)}")
    # hidden_states[0] is the embedding output, [i + 1] the output of layer i (i < L − 1) ...
    if not torch.allclose(hs[0], model.model.embed_tokens(torch.tensor([ids])), rtol=1e-6, atol=1e-6):
        raise SystemExit("hidden_states[0] is not the embedding output")
    for i in range(L - 1):
        if not torch.allclose(hs[i + 1], hooked[i], rtol=1e-6, atol=1e-6):
            raise SystemExit(f"hidden_states[{i + 1}] is not the output of layer {i}")
    # ... and [L] is the final norm of layer L − 1's output, not the output itself: the tap of the
    # last layer comes from the hook. The logits are lm_head of that norm.
    normed = model.model.norm(hooked[L - 1])
    if not torch.allclose(hs[L], normed, rtol=1e-5, atol=1e-5):
        if torch.allclose(hs[L], hooked[L - 1], rtol=1e-6, atol=1e-6):
            print("note: this transformers returns the raw last layer output as hidden_states[L]")
        else:
            raise SystemExit("hidden_states[L] is neither the last layer output nor its final norm")
    logits = out.logits[0].float()
    if not torch.allclose(logits, model.lm_head(normed)[0].float(), rtol=1e-5, atol=1e-4):
        raise SystemExit("logits are not lm_head(norm(last layer output))")

    def tap(i):
        return (hs[i + 1] if i < L - 1 else hooked[L - 1])[0]

    return logits, torch.stack([tap(i).float() for i in taps])


# ---- The draft. ----

def add_draft_modules(root, cfg, qcfg, n_taps):
    """Gives `root` the DFlash draft's modules, named as in the z-lab checkpoint (fc, hidden_norm,
    norm, layers.{i}.self_attn.{q,k,v,o}_proj and {q,k}_norm, input_layernorm,
    post_attention_layernorm, mlp). One definition for the oracle and train/train_dflash.py, so
    the weights one saves are the names the other (and the runtime) loads. Returns root."""
    from torch import nn
    from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm
    H, D = cfg["hidden_size"], cfg["head_dim"]
    Hq, Hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    root.fc = nn.Linear(n_taps * H, H, bias=False)
    root.hidden_norm = Qwen3RMSNorm(H, eps=eps)
    root.norm = Qwen3RMSNorm(H, eps=eps)
    layers = []
    for _ in range(cfg["num_hidden_layers"]):
        layer, attn = nn.Module(), nn.Module()
        attn.q_proj = nn.Linear(H, Hq * D, bias=False)
        attn.k_proj = nn.Linear(H, Hkv * D, bias=False)
        attn.v_proj = nn.Linear(H, Hkv * D, bias=False)
        attn.o_proj = nn.Linear(Hq * D, H, bias=False)
        attn.q_norm = Qwen3RMSNorm(D, eps=eps)
        attn.k_norm = Qwen3RMSNorm(D, eps=eps)
        layer.self_attn = attn
        layer.input_layernorm = Qwen3RMSNorm(H, eps=eps)
        layer.post_attention_layernorm = Qwen3RMSNorm(H, eps=eps)
        layer.mlp = Qwen3MLP(qcfg)
        layers.append(layer)
    root.layers = nn.ModuleList(layers)
    return root


class DFlashReference:
    """The draft of `draft_dir` paired with `target` (its embedding table and lm_head)."""

    def __init__(self, draft_dir, target):
        from torch import nn
        from safetensors.torch import load_file
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
        with open(os.path.join(draft_dir, "config.json")) as f:
            cfg = json.load(f)
        if cfg.get("architectures") != ["DFlashDraftModel"]:
            raise SystemExit(f"{draft_dir} is not a DFlashDraftModel")
        self.cfg = cfg
        self.H, self.D = cfg["hidden_size"], cfg["head_dim"]
        self.Hq, self.Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.block_size = cfg["block_size"]
        self.mask_token_id = cfg["dflash_config"]["mask_token_id"]
        self.taps = list(cfg["dflash_config"]["target_layer_ids"])
        if cfg.get("rope_scaling") or cfg.get("attention_bias") or \
                any(t != "full_attention" for t in cfg.get("layer_types", [])):
            raise SystemExit("the oracle covers default RoPE, no bias, full attention only")
        theta = cfg["rope_parameters"]["rope_theta"] if "rope_parameters" in cfg else cfg["rope_theta"]
        dims = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "num_key_value_heads", "head_dim",
                                    "max_position_embeddings", "rms_norm_eps")}
        qcfg = qwen3_config(dims, theta)
        H, D, n = self.H, self.D, len(self.taps)

        # Modules named as the z-lab checkpoint, so load_state_dict(strict) checks every name.
        root = add_draft_modules(nn.Module(), cfg, qcfg, n)
        weights = load_file(os.path.join(draft_dir, "model.safetensors"))
        mask = weights.pop("mask_embedding", None)
        root.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
        self.root = root.float().eval()
        self.rotary = Qwen3RotaryEmbedding(config=qcfg)  # the draft's own RoPE
        check_rotary(self.rotary, theta, D, "draft")

        self.embed = target.get_input_embeddings().weight.detach().float()
        self.lm_head = target.get_output_embeddings().weight.detach().float()
        V = self.embed.shape[0]
        if mask is not None:
            self.mask_row = mask.float().reshape(H)
        else:
            if not 0 <= self.mask_token_id < V:
                raise SystemExit(f"mask_token_id {self.mask_token_id} outside the target vocabulary {V}")
            self.mask_row = self.embed[self.mask_token_id]  # as is: not zeroed (spec §5)
        fc_in = self.root.fc.weight.shape[1]
        if fc_in != n * H:
            raise SystemExit(f"fc.weight has {fc_in} columns, want taps × hidden = {n * H}")

    def _heads(self, x, heads):  # [S, heads·D] -> [1, heads, S, D]
        return x.view(x.shape[0], heads, self.D).transpose(0, 1)[None]

    def attention(self, q, k, v):
        """q [1, Hq, S, D] over k, v [1, Hkv, N, D]: no mask, GQA (kv head g serves q heads
        g·group … g·group + group − 1). Returns [S, Hq·D]."""
        import torch
        import torch.nn.functional as F
        group = self.Hq // self.Hkv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (self.D ** -0.5)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        out = torch.matmul(probs, v)
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        if not torch.allclose(out, sdpa, rtol=1e-4, atol=1e-5):
            raise SystemExit("explicit attention differs from scaled_dot_product_attention")
        return out[0].transpose(0, 1).reshape(q.shape[2], self.Hq * self.D)

    def propose(self, feats, anchor):
        """Logits [BS, V] of the block [anchor, mask × (BS − 1)] at positions T … T+BS−1 over the
        context of `feats` [T, n·H] (concatenated taps of positions 0 … T−1, in fc order)."""
        import torch
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
        r, BS, H = self.root, self.block_size, self.H
        T = feats.shape[0]
        with torch.no_grad():
            # Context: fc, hidden_norm; per layer k_proj + k_norm + RoPE at 0 … T−1, v_proj.
            ctx = r.hidden_norm(r.fc(feats))
            cos_c, sin_c = self.rotary(ctx[None], torch.arange(T)[None])
            # Block: embeddings, positions T … T+BS−1.
            h = torch.cat([self.embed[anchor][None], self.mask_row[None].expand(BS - 1, H)], 0).clone()
            cos_b, sin_b = self.rotary(h[None], torch.arange(T, T + BS)[None])
            for layer in r.layers:
                a = layer.self_attn
                kc = a.k_norm(self._heads(a.k_proj(ctx), self.Hkv))
                kc, _ = apply_rotary_pos_emb(kc, kc, cos_c, sin_c)
                vc = self._heads(a.v_proj(ctx), self.Hkv)
                x = layer.input_layernorm(h)
                q = a.q_norm(self._heads(a.q_proj(x), self.Hq))
                kb = a.k_norm(self._heads(a.k_proj(x), self.Hkv))
                vb = self._heads(a.v_proj(x), self.Hkv)
                q, kb = apply_rotary_pos_emb(q, kb, cos_b, sin_b)
                attn = self.attention(q, torch.cat([kc, kb], dim=2), torch.cat([vc, vb], dim=2))
                h = h + a.o_proj(attn)
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return torch.nn.functional.linear(r.norm(h), self.lm_head).float()


# ---- The scenario. ----

def make_scenario(vocab_size):
    import torch
    g = torch.Generator().manual_seed(SCENARIO_SEED)
    seqs = []
    for length, accepted in zip(PROMPT_LENGTHS, ACCEPTED):
        # Tokens below the mask id (the mask row stays a spare row).
        prompt = torch.randint(0, vocab_size - 1, (length,), generator=g).tolist()
        drafted = torch.randint(0, vocab_size - 1, (BLOCK_SIZE - 1,), generator=g).tolist()
        seqs.append({"prompt": prompt, "drafted": drafted, "accepted": accepted})
    return seqs


def run_scenario(target, draft, seqs):
    """Both rounds, every sequence from scratch. Returns (meta, tensors)."""
    import torch
    n, H, BS = len(draft.taps), draft.H, draft.block_size
    if draft.taps != TAPS or BS != BLOCK_SIZE:
        raise SystemExit("draft config does not match the scenario constants")
    rounds = [{"block_starts": [], "anchors": [], "argmax": [], "top2_margin": []} for _ in range(2)]
    logits = [[], []]
    sequences, tensors = [], {}
    for b, s in enumerate(seqs):
        prompt, acc = s["prompt"], s["accepted"]
        L = len(prompt)
        prompt_logits, prompt_taps = target_forward(target, prompt, draft.taps)
        anchor0 = int(torch.argmax(prompt_logits[-1]))
        verify = [anchor0] + list(s["drafted"])
        committed = prompt + verify[:acc + 1]
        full_logits, taps = target_forward(target, committed, draft.taps)
        anchor1 = int(torch.argmax(full_logits[-1]))
        # Causality: the prompt rows of the longer forward are the prompt forward's.
        if not torch.allclose(taps[:, :L], prompt_taps, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"sequence {b}: prompt taps differ between the two target forwards")
        tensors[f"taps_seq{b}"] = taps.contiguous()
        sequences.append({"prompt": prompt, "verify": verify, "accepted": acc, "committed": len(committed)})
        for r, (start, anchor) in enumerate([(L, anchor0), (len(committed), anchor1)]):
            feats = taps[:, :start].permute(1, 0, 2).reshape(start, n * H)  # [tap0 | tap1 | …] per row
            out = draft.propose(feats, anchor)
            logits[r].append(out)
            rounds[r]["block_starts"].append(start)
            rounds[r]["anchors"].append(anchor)
            rounds[r]["argmax"].append([int(i) for i in torch.argmax(out, dim=-1)])
            rounds[r]["top2_margin"].append([top2_margin(row.tolist()) for row in out])
    for r in range(2):
        tensors[f"logits_round{r}"] = torch.stack(logits[r]).contiguous()  # [B, BS, V]
    meta = {
        "format": "dflash-oracle-1",
        "generator": "tools/dflash_reference.py",
        "target": "target",
        "draft": "draft",
        "block_size": BS,
        "target_layer_ids": list(draft.taps),
        "mask_token_id": draft.mask_token_id,
        "vocab_size": int(draft.embed.shape[0]),
        "hidden_size": H,
        "sequences": sequences,
        "rounds": rounds,
    }
    return meta, tensors


def load_pair(out_dir):
    target = load_target(os.path.join(out_dir, "target"))
    return target, DFlashReference(os.path.join(out_dir, "draft"), target)


def versions():
    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__}


def check(out_dir):
    """Recompute from the saved folders; compare with the stored reference. Returns 0 if equal."""
    from safetensors.torch import load_file
    with open(os.path.join(out_dir, "reference.json")) as f:
        meta = json.load(f)
    stored = load_file(os.path.join(out_dir, "reference.safetensors"))
    target, draft = load_pair(out_dir)
    seqs = [{"prompt": s["prompt"], "drafted": s["verify"][1:], "accepted": s["accepted"]}
            for s in meta["sequences"]]
    got_meta, got = run_scenario(target, draft, seqs)
    bad = []
    for s_got, s_want in zip(got_meta["sequences"], meta["sequences"]):
        if s_got != s_want:
            bad.append("sequence tokens (anchor 0) differ")
    for r, (rg, rw) in enumerate(zip(got_meta["rounds"], meta["rounds"])):
        for key in ("block_starts", "anchors"):
            if rg[key] != rw[key]:
                bad.append(f"round {r} {key}: {rg[key]} vs stored {rw[key]}")
        for b in range(len(rg["argmax"])):
            for i, (x, y) in enumerate(zip(rg["argmax"][b], rw["argmax"][b])):
                if x != y and rw["top2_margin"][b][i] > 1e-3:
                    bad.append(f"round {r} sequence {b} row {i}: argmax {x} vs stored {y}")
    for name, want in stored.items():
        have = got.get(name)
        if have is None or have.shape != want.shape:
            bad.append(f"{name}: shape {None if have is None else tuple(have.shape)} vs {tuple(want.shape)}")
            continue
        err = float((have - want).abs().max()) / max(1.0, float(want.abs().max()))
        print(f"{name:16s} {tuple(want.shape)} max |diff| / scale = {err:.2e}")
        if err > 1e-4:
            bad.append(f"{name}: relative error {err:.2e}")
    print(f"stored with {meta.get('versions')}, checked with {versions()}")
    for line in bad:
        print("MISMATCH", line)
    print("check", "FAILED" if bad else "ok")
    return 1 if bad else 0


def make_fixture(out_dir):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(0)
    check_apply_rotary()
    os.makedirs(out_dir, exist_ok=True)
    make_target(os.path.join(out_dir, "target"))
    make_draft(os.path.join(out_dir, "draft"))
    target, draft = load_pair(out_dir)
    meta, tensors = run_scenario(target, draft, make_scenario(target.config.vocab_size))
    meta["versions"] = versions()
    save_file(tensors, os.path.join(out_dir, "reference.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(meta, f)
        f.write("\n")
    for r, rd in enumerate(meta["rounds"]):
        low = min(min(m) for m in rd["top2_margin"])
        print(f"round {r}: starts {rd['block_starts']} anchors {rd['anchors']} smallest top-2 margin {low:.3g}")
    size = fixture_bytes(out_dir)
    print(f"{out_dir}: {size} bytes", {k: list(v.shape) for k, v in tensors.items()})
    if size > MAX_FIXTURE_BYTES:
        raise SystemExit(f"fixture is {size} bytes, over {MAX_FIXTURE_BYTES}")
    return check(out_dir)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["make-fixture", "check"])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    import torch
    torch.set_grad_enabled(False)
    sys.exit(make_fixture(args.out_dir) if args.mode == "make-fixture" else check(args.out_dir))


if __name__ == "__main__":
    main()
