#!/usr/bin/env python3
"""Train a DFlash draft (arXiv 2602.06036) for the default model on the GPU machine.

    python3 train/train_dflash.py --model train/work/smollm2 --data train/work/responses.npz \
        --out $OUT/draft --max-seconds 540 [--resume]
    python3 train/train_dflash.py --dry-run            # tiny random target + data on the CPU, seconds

Recipe (the paper's facts; numbers marked * are this project's choices, see docs/training.md):
  * target frozen (transformers LlamaForCausalLM, bf16); data = the target's own responses
    (train/generate_responses.py), greedy and sampled at temperature 1;
  * per sequence --anchors* random anchor positions a in the response (a >= prompt length,
    a + 1 < length); block = [token a, mask x (BS - 1)] at positions a … a+BS-1; the draft sees
    the context of positions 0 … a-1 through K/V computed from hidden_norm(fc(concat taps)) —
    exactly the inference formulation of spec §5 / tools/dflash_reference.py (taps = residual
    stream after target layer i, before the final norm; the last layer through a hook);
  * attention: every block row sees its context (key positions < a) and its own block (no causal
    mask inside the block); all anchors of a sequence run in one masked attention call;
  * loss: cross-entropy of block row k (k = 1 … BS-1) against the token at a + k, through the
    target's frozen lm_head, weighted by exp(-(k-1)/gamma);
  * AdamW, linear warm-up then cosine decay, bf16 autocast, gradient clipping*.
The mask embedding: SmolLM2 has no spare vocabulary row, so the draft learns and ships its own
`mask_embedding` [hidden]; config.json's dflash_config.mask_token_id is then unused by the
runtime (src/model/dflash_draft.cpp reads the shipped row) and set to 0.

Output (--out, the z-lab folder the runtime and tools/dflash_reference.py load): config.json,
model.safetensors (or shards + model.safetensors.index.json when larger than --shard-mib),
train_log.json (settings, loss curve, held-out accept proxy, step counter for --resume). A full
checkpoint (fp32 weights + AdamW state) is also kept in --ckpt (train/work/ckpt.pt by default,
stays on the GPU machine while it is warm); --resume prefers it and otherwise restarts the
optimizer from the weights in --init-from (default: --out), continuing the schedule's step count.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import dflash_reference as ref  # noqa: E402  (qwen3_config, check_rotary, DFlashReference)


def default_taps(num_target_layers, n):
    """z-lab's build_target_layer_ids: n = 1 -> [L // 2], else round(1 + i (L - 4) / (n - 1))."""
    if n == 1:
        return [num_target_layers // 2]
    return [int(round(1 + i * (num_target_layers - 4) / (n - 1))) for i in range(n)]


def draft_config(target_cfg, args):
    L = target_cfg.num_hidden_layers
    taps = [int(x) for x in args.taps.split(",")] if args.taps else default_taps(L, args.num_taps)
    rope_theta = getattr(target_cfg, "rope_theta", None)
    if rope_theta is None:
        rope_theta = (getattr(target_cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": args.block_size,
        "dflash_config": {"mask_token_id": 0, "target_layer_ids": taps},
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "hidden_size": target_cfg.hidden_size,
        "intermediate_size": args.intermediate_size or target_cfg.intermediate_size,
        "layer_types": ["full_attention"] * args.layers,
        "max_position_embeddings": target_cfg.max_position_embeddings,
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "num_target_layers": L,
        "rms_norm_eps": float(target_cfg.rms_norm_eps),
        "rope_scaling": None,
        "rope_theta": float(rope_theta),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": target_cfg.vocab_size,
    }


# ---- The draft as a trainable module (parameter names = the z-lab checkpoint's). ----

def build_draft(cfg, init_mask_row):
    import torch
    from torch import nn
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    H, D, Hq, Hkv = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    n = len(cfg["dflash_config"]["target_layer_ids"])
    dims = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "head_dim",
                                "max_position_embeddings", "rms_norm_eps")}
    qcfg = ref.qwen3_config(dims, cfg["rope_theta"])

    class Draft(nn.Module):
        def __init__(self):
            super().__init__()
            ref.add_draft_modules(self, cfg, qcfg, n)  # fc, hidden_norm, norm, layers (z-lab names)
            self.mask_embedding = nn.Parameter(init_mask_row.detach().float().clone().reshape(H))
            # Not a parameter: rebuilt from the config (as z-lab and the runtime do), never saved.
            self.rotary = Qwen3RotaryEmbedding(config=qcfg)

        def init_weights(self, seed):
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name == "mask_embedding":
                        continue
                    if p.dim() == 1:
                        p.fill_(1.0)  # RMSNorm weights
                    else:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                # Residual branches start small (GPT-2 style).
                scale = 1.0 / math.sqrt(2 * len(self.layers))
                for layer in self.layers:
                    layer.self_attn.o_proj.weight.mul_(scale)
                    layer.mlp.down_proj.weight.mul_(scale)
                # The output goes through the target's lm_head, whose rows (tied embeddings) are
                # long: with a unit final norm the first logits span ~±80 (SmolLM2: initial loss
                # ~87 against ln V = 10.8). A small final-norm scale starts near uniform instead.
                self.norm.weight.fill_(1.0 / math.sqrt(H))

        def state_for_save(self):
            return {k: v for k, v in self.state_dict().items() if not k.startswith("rotary.")}

        def forward(self, feats, ctx_len, anchor_tok_emb, anchors):
            """Block hidden states after the final norm.
            feats [B, N, n·H] (concatenated taps of positions 0 … N-1, fc order), ctx_len [B]
            (valid positions), anchor_tok_emb [B, A, H] (target embeddings of the anchor tokens),
            anchors [B, A] (anchor positions; -1 = unused slot). Block j of sequence b sits at
            positions anchors[b, j] + 0 … BS-1 and sees context keys at positions < anchors[b, j]
            and its own block. Returns [B, A·BS, H]."""
            import torch.nn.functional as F
            from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
            B, N, _ = feats.shape
            A, BS = anchors.shape[1], cfg["block_size"]
            S = A * BS
            dev = feats.device
            ctx = self.hidden_norm(self.fc(feats))                                     # [B, N, H]
            a = anchors.clamp(min=0)
            h = torch.cat([anchor_tok_emb[:, :, None, :],
                           self.mask_embedding.to(anchor_tok_emb.dtype).expand(B, A, BS - 1, H)], dim=2)
            h = h.reshape(B, S, H)
            offs = torch.arange(BS, device=dev)
            pos_b = (a[:, :, None] + offs).reshape(B, S)                               # [B, S]
            pos_c = torch.arange(N, device=dev)[None].expand(B, N)
            cos_b, sin_b = self.rotary(h.float(), pos_b)  # f32 cos/sin, as the runtime's table
            cos_c, sin_c = self.rotary(ctx.float(), pos_c)
            # Mask [B, 1, S, N + S]: context keys < anchor (and < ctx_len), own block only.
            key_c = torch.arange(N, device=dev)
            ok_c = (key_c[None, None, :] < a.reshape(B, A, 1)) & (key_c[None, None, :] < ctx_len[:, None, None])
            ok_c = ok_c[:, :, None, :].expand(B, A, BS, N).reshape(B, S, N)
            blk = torch.arange(S, device=dev) // BS
            ok_b = (blk[:, None] == blk[None, :])[None].expand(B, S, S)
            mask = torch.cat([ok_c, ok_b], dim=2)[:, None]
            group = Hq // Hkv

            def heads(x, nh):  # [B, T, nh·D] -> [B, nh, T, D]
                return x.view(x.shape[0], x.shape[1], nh, D).transpose(1, 2)

            for layer in self.layers:
                at = layer.self_attn
                kc = at.k_norm(heads(at.k_proj(ctx), Hkv))
                kc, _ = apply_rotary_pos_emb(kc, kc, cos_c, sin_c)
                vc = heads(at.v_proj(ctx), Hkv)
                x = layer.input_layernorm(h)
                q = at.q_norm(heads(at.q_proj(x), Hq))
                kb = at.k_norm(heads(at.k_proj(x), Hkv))
                vb = heads(at.v_proj(x), Hkv)
                q, kb = apply_rotary_pos_emb(q, kb, cos_b, sin_b)
                k = torch.cat([kc, kb], dim=2).repeat_interleave(group, dim=1)
                v = torch.cat([vc, vb], dim=2).repeat_interleave(group, dim=1)
                o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask,
                                                   scale=D ** -0.5)
                h = h + at.o_proj(o.transpose(1, 2).reshape(B, S, Hq * D))
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return self.norm(h)

    d = Draft()
    ref.check_rotary(d.rotary, cfg["rope_theta"], D, "draft")
    return d


# ---- The target: tapped layer outputs. ----

class Taps:
    """Runs the frozen target and returns concat(taps) [B, N, n·H], tap i = the output of target
    layer i (residual stream after the layer, before the final norm), read with forward hooks on
    the tapped layers. The first call also cross-checks the hooks against transformers'
    hidden_states[i + 1] for i < L-1 (hidden_states[L] is final-normed, as
    tools/dflash_reference.py notes), so the convention cannot drift silently."""

    def __init__(self, target, taps):
        self.target, self.taps = target, list(taps)
        self.L = target.config.num_hidden_layers
        self.saved = {}
        self.checked = False
        for i in sorted(set(self.taps)):
            target.model.layers[i].register_forward_hook(self._hook(i))

    def _hook(self, i):
        def save(_m, _inp, out):
            self.saved[i] = out[0] if isinstance(out, tuple) else out
        return save

    def __call__(self, ids, attn_mask):
        import torch
        self.saved.clear()
        with torch.no_grad():
            want_hs = not self.checked
            out = self.target.model(input_ids=ids, attention_mask=attn_mask, output_hidden_states=want_hs)
            if want_hs:
                hs = getattr(out, "hidden_states", None)
                if hs is None:
                    print("note: no hidden_states returned; taps from the hooks only (unchecked)")
                elif len(hs) != self.L + 1:
                    raise SystemExit(f"expected {self.L + 1} hidden states, got {len(hs)}")
                for i in self.taps if hs is not None else []:
                    if i < self.L - 1 and not torch.equal(hs[i + 1], self.saved[i]):
                        raise SystemExit(f"hook of layer {i} differs from hidden_states[{i + 1}]")
                self.checked = True
            # The final-normed hidden state [B, N, H]: the target's own next-token logits through
            # its lm_head, for --kd-weight.
            self.final = out.last_hidden_state
            return torch.cat([self.saved[i] for i in self.taps], dim=-1)


# ---- Data. ----

class Data:
    def __init__(self, paths, split):
        """paths: one .npz of generate_responses.py, or several separated by commas."""
        self.seqs, self.prompt_lens, self.temperature = [], [], []
        for path in paths.split(","):
            z = np.load(path)
            keep = np.nonzero(z["split"] == split)[0]
            off, toks, pl = z["offsets"], z["tokens"], z["prompt_lens"]
            self.seqs += [toks[off[i]:off[i + 1]].astype(np.int64) for i in keep]
            self.prompt_lens += [int(pl[i]) for i in keep]
            self.temperature += [float(z["temperature"][i]) for i in keep]
        ok = [i for i, (s, p) in enumerate(zip(self.seqs, self.prompt_lens)) if len(s) - p >= 2]
        self.seqs = [self.seqs[i] for i in ok]
        self.prompt_lens = [self.prompt_lens[i] for i in ok]
        self.temperature = [self.temperature[i] for i in ok]

    def __len__(self):
        return len(self.seqs)


def sample_anchors(rng, prompt_len, length, A):
    """A distinct anchor positions in [prompt_len, length - 2] (fewer if the response is short;
    -1 fills the rest)."""
    lo, hi = prompt_len, length - 2
    n = hi - lo + 1
    picks = sorted(rng.sample(range(lo, hi + 1), min(A, n))) if n > 0 else []
    return picks + [-1] * (A - len(picks))


def make_batch_np(data, idx, A, BS, pad, rng):
    """numpy: ids [B, N], attn [B, N], anchors [B, A], labels [B, A, BS] (-100 = none; row 0 is
    always -100: the anchor row is given, not predicted; row k >= 1 is the token at anchor + k)."""
    seqs = [data.seqs[i] for i in idx]
    N = max(len(s) for s in seqs)
    B = len(idx)
    ids = np.full((B, N), pad, np.int64)
    attn = np.zeros((B, N), np.int64)
    anchors = np.full((B, A), -1, np.int64)
    labels = np.full((B, A, BS), -100, np.int64)
    for b, (i, s) in enumerate(zip(idx, seqs)):
        ids[b, :len(s)] = s
        attn[b, :len(s)] = 1
        for j, a in enumerate(sample_anchors(rng, data.prompt_lens[i], len(s), A)):
            if a < 0:
                continue
            anchors[b, j] = a
            k_max = min(BS - 1, len(s) - 1 - a)
            labels[b, j, 1:k_max + 1] = s[a + 1:a + k_max + 1]
    return ids, attn, anchors, labels


def make_batch(data, idx, A, BS, pad, rng, device):
    """make_batch_np as torch tensors on `device`, plus lengths [B]."""
    import torch
    ids, attn, anchors, labels = make_batch_np(data, idx, A, BS, pad, rng)
    t = lambda x: torch.from_numpy(x).to(device)  # noqa: E731
    return t(ids), t(attn), t(attn.sum(1)), t(anchors), t(labels)


def check_pure():
    """Checks of the torch-free parts (run anywhere: python3 train/train_dflash.py --check)."""
    assert default_taps(30, 5) == [1, 8, 14, 20, 27], default_taps(30, 5)
    assert default_taps(36, 5) == [1, 9, 17, 25, 33]  # z-lab's Qwen3-8B draft taps
    assert default_taps(30, 1) == [15]

    class D:
        seqs = [np.arange(100, 130), np.arange(200, 210), np.arange(300, 305)]
        prompt_lens = [10, 7, 4]
    rng = random.Random(0)
    for _ in range(50):
        ids, attn, anchors, labels = make_batch_np(D, [0, 1, 2], 4, 8, -5, rng)
        assert ids.shape == (3, 30) and attn.sum() == 45 and (ids[1, 10:] == -5).all()
        for b, s in enumerate(D.seqs):
            got = [int(x) for x in anchors[b] if x >= 0]
            assert len(got) == len(set(got)) == min(4, len(s) - 1 - D.prompt_lens[b])
            for j, a in enumerate(anchors[b]):
                if a < 0:
                    assert (labels[b, j] == -100).all()
                    continue
                assert D.prompt_lens[b] <= a <= len(s) - 2
                assert labels[b, j, 0] == -100
                for k in range(1, 8):
                    want = s[a + k] if a + k < len(s) else -100
                    assert labels[b, j, k] == want, (b, j, k)
    # Sequence 2 (prompt 4, length 5): no anchor fits (a + 1 < length needs a <= 3 < prompt).
    assert sample_anchors(random.Random(1), 4, 5, 3) == [-1, -1, -1]
    assert sample_anchors(random.Random(1), 4, 6, 3) == [4, -1, -1]
    assert abs(lr_at(0, 100, 10, 1.0, 0.1) - 0.1) < 1e-12 and abs(lr_at(9, 100, 10, 1.0, 0.1) - 1.0) < 1e-12
    assert abs(lr_at(100, 100, 10, 1.0, 0.1) - 0.1) < 1e-12 and lr_at(55, 100, 10, 1.0, 0.1) < 1.0
    w = [math.exp(-(k - 1) / 7.0) for k in range(1, 16)]
    assert w[0] == 1.0 and abs(w[7] - math.exp(-1)) < 1e-12
    print("train_dflash --check ok")


def block_logits_loss(draft, target, taps, batch, gamma, compute_dtype, kd_weight=0.0):
    """(weighted loss, per-row argmax [B, A, BS], labels) of one batch. The loss is the paper's
    cross-entropy against the response tokens; with kd_weight > 0 it is
    (1 - kd_weight) CE + kd_weight KL(p_target || q_draft), where p_target is the target's own
    next-token distribution at the same position (its logits at anchor + k - 1, taken from the
    forward that already runs for the taps), so a row learns the whole distribution, not only the
    greedy token. Both terms carry the same exp(-(k-1)/gamma) weights."""
    import torch
    import torch.nn.functional as F
    ids, attn, lengths, anchors, labels = batch
    B, A, BS = labels.shape
    # Padding rows (never attended: masked) zeroed anyway, so no stray inf/NaN can leak through.
    feats = (taps(ids, attn) * attn[:, :, None]).to(compute_dtype)
    emb = target.get_input_embeddings().weight
    anchor_tok = torch.gather(ids, 1, anchors.clamp(min=0))                  # [B, A]
    anchor_emb = emb[anchor_tok].to(compute_dtype)                           # [B, A, H]
    with torch.autocast(device_type=ids.device.type, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
        h = draft(feats, lengths, anchor_emb, anchors)                       # [B, A·BS, H]
        logits = F.linear(h, target.get_output_embeddings().weight)  # autocast: bf16 operands
    logits = logits.float().view(B, A, BS, -1)
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100,
                         reduction="none").view(B, A, BS)
    k = torch.arange(BS, device=ids.device, dtype=torch.float32)
    w = torch.exp(-(k - 1).clamp(min=0) / gamma)[None, None, :] * (labels >= 0)
    per_row = ce
    if kd_weight > 0:
        with torch.no_grad():
            # Row k of the block at anchor a predicts the token at a + k: the target's
            # distribution for it comes from position a + k - 1 (row 0 is unweighted).
            N = taps.final.shape[1]
            pos = (anchors.clamp(min=0)[:, :, None] + torch.arange(BS, device=ids.device)[None, None, :] - 1)
            pos = pos.clamp(0, N - 1).view(B, A * BS)
            hid = torch.gather(taps.final, 1, pos[:, :, None].expand(-1, -1, taps.final.shape[-1]))
            with torch.autocast(device_type=ids.device.type, dtype=compute_dtype,
                                enabled=compute_dtype != torch.float32):
                t_logits = F.linear(hid, target.get_output_embeddings().weight)
            log_p = F.log_softmax(t_logits.float().view(B, A, BS, -1), dim=-1)
        log_q = F.log_softmax(logits, dim=-1)
        kl = F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1)  # [B, A, BS]
        # Unlabelled rows (past the response, padding) have weight 0; keep any non-finite value
        # they might hold out of the sum (0 * NaN is NaN).
        kl = torch.where(w > 0, kl, torch.zeros_like(kl))
        per_row = (1.0 - kd_weight) * ce + kd_weight * kl
    loss = (per_row * w).sum() / w.sum().clamp(min=1e-6)
    return loss, logits.argmax(-1), labels


def check_kd_alignment(target, taps, batch, gamma):
    """--dry-run: the KD term's positions. A stand-in draft whose block row k outputs the target's
    final hidden state at anchor + k - 1 reproduces the target's distribution for that row, so its
    KL must be 0 on every weighted row; the same stand-in shifted by one position must not be."""
    import torch
    B, A, BS = batch[4].shape

    class StandIn(torch.nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.shift = shift

        def forward(self, feats, ctx_len, anchor_emb, anchors):
            final = taps.final  # set by the taps call that just ran in block_logits_loss
            pos = anchors.clamp(min=0)[:, :, None] + torch.arange(BS, device=anchors.device)[None, None, :] - 1
            pos = (pos + self.shift).clamp(0, final.shape[1] - 1).view(B, A * BS)
            return torch.gather(final, 1, pos[:, :, None].expand(-1, -1, final.shape[-1]))

    exact = float(block_logits_loss(StandIn(0), target, taps, batch, gamma, torch.float32, kd_weight=1.0)[0])
    shifted = float(block_logits_loss(StandIn(1), target, taps, batch, gamma, torch.float32, kd_weight=1.0)[0])
    if not (abs(exact) < 1e-5 and shifted > 1e-3):
        raise SystemExit(f"KD alignment check failed: KL {exact:.3g} at the right positions, {shifted:.3g} shifted")
    return exact, shifted


def accept_proxy(pred, labels):
    """Mean number of leading correct block positions (rows 1 … BS-1) per anchor: the accepted
    length of a greedy verify if the target's own continuation were the data. Anchors with fewer
    than BS-1 labels count their available rows only."""
    import torch
    valid = labels[:, :, 1:] >= 0
    good = (pred[:, :, 1:] == labels[:, :, 1:]) & valid
    lead = torch.cumprod(good.int(), dim=-1).sum(-1).float()
    has = valid[:, :, 0]
    return float(lead[has].mean()) if has.any() else float("nan")


# ---- Saving / loading the z-lab folder. ----

def save_draft(draft, cfg, out_dir, shard_mib):
    """config.json + model.safetensors (bf16), sharded under shard_mib MiB per file with
    model.safetensors.index.json when larger. Returns the file names written."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in draft.state_for_save().items()}
    for f in os.listdir(out_dir):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".index.json")):
            os.remove(os.path.join(out_dir, f))
    limit = shard_mib * 1024 * 1024 - 64 * 1024  # header headroom
    shards, cur, size = [], {}, 0
    for name in sorted(sd):
        nb = sd[name].numel() * 2
        if cur and size + nb > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = sd[name]
        size += nb
    shards.append(cur)
    written = []
    if len(shards) == 1:
        save_file(shards[0], os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        written.append("model.safetensors")
    else:
        weight_map = {}
        for i, sh in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(sh, os.path.join(out_dir, fname), metadata={"format": "pt"})
            weight_map.update({k: fname for k in sh})
            written.append(fname)
        total = sum(v.numel() * 2 for v in sd.values())
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
            f.write("\n")
        written.append("model.safetensors.index.json")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return written + ["config.json"]


def load_draft_weights(folder):
    """{name: tensor} of a z-lab folder, single file or sharded."""
    from safetensors.torch import load_file
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for fname in files:
            out.update(load_file(os.path.join(folder, fname)))
        return out
    return load_file(os.path.join(folder, "model.safetensors"))


def load_draft_into(draft, folder):
    """Loads a z-lab folder's weights (as float32) into the Draft module; exits naming the folder
    when the names do not match (rotary.* is rebuilt from the config, never saved)."""
    res = draft.load_state_dict({k: v.float() for k, v in load_draft_weights(folder).items()}, strict=False)
    bad = [k for k in res.missing_keys if not k.startswith("rotary.")] + list(res.unexpected_keys)
    if bad:
        raise SystemExit(f"{folder}: weights do not match the draft its config builds: {bad[:5]}")


def open_draft(folder, target):
    """A trained draft folder for evaluation: (its config, the Draft module with its weights,
    Taps on `target` at the draft's tapped layers)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    draft = build_draft(cfg, target.get_input_embeddings().weight.float().mean(0))
    load_draft_into(draft, folder)
    return cfg, draft, Taps(target, cfg["dflash_config"]["target_layer_ids"])


def print_report(result, path=None):
    """Prints an evaluation's result as JSON, and writes it to `path` when given."""
    print(json.dumps(result, indent=1))
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


def reference_check(draft, cfg, target, feats_row, ids_row, anchor, out_dir, compute_dtype):
    """The saved folder, run by tools/dflash_reference.py's DFlashReference (the oracle of the
    runtime's forward, float32 on the CPU), against this module's forward for one anchor: the
    training formulation must be the inference one. Returns (argmax agreement, max |diff| /
    scale of the logits)."""
    import tempfile
    import torch
    from safetensors.torch import save_file
    with tempfile.TemporaryDirectory() as tmp:  # the oracle reads a single model.safetensors
        save_file({k: v.contiguous() for k, v in load_draft_weights(out_dir).items()},
                  os.path.join(tmp, "model.safetensors"))
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)

        class CpuTarget:  # the oracle only needs the embedding table and lm_head
            def __init__(self, t):
                self.e = torch.nn.Embedding.from_pretrained(t.get_input_embeddings().weight.detach().float().cpu())
                self.o = torch.nn.Linear(1, 1)
                self.o.weight = torch.nn.Parameter(t.get_output_embeddings().weight.detach().float().cpu())

            def get_input_embeddings(self):
                return self.e

            def get_output_embeddings(self):
                return self.o
        oracle = ref.DFlashReference(tmp, CpuTarget(target))
        want = oracle.propose(feats_row[:anchor].float().cpu(), int(ids_row[anchor]))   # [BS, V]
    # This module, in float32 on the CPU, with the bf16-rounded weights the folder holds.
    import copy
    d32 = copy.deepcopy(draft).float().cpu()
    with torch.no_grad():
        for name, p in d32.named_parameters():
            p.copy_(p.to(torch.bfloat16).float())
        emb = target.get_input_embeddings().weight.detach().float().cpu()
        h = d32(feats_row[None].float().cpu(), torch.tensor([feats_row.shape[0]]),
                emb[ids_row[anchor]].reshape(1, 1, -1), torch.tensor([[anchor]]))
        got = torch.nn.functional.linear(h[0], target.get_output_embeddings().weight.detach().float().cpu())
    err = float((got - want).abs().max()) / max(1.0, float(want.abs().max()))
    agree = float((got.argmax(-1) == want.argmax(-1)).float().mean())
    return agree, err


# ---- Training. ----

def lr_at(step, total, warmup, peak, floor_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def tiny_target_and_data(path, block_size):
    """--dry-run: a random 4-layer Llama (hidden 128, head dim 64) and random 'responses'."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      eos_token_id=2, pad_token_id=2)
    target = LlamaForCausalLM(cfg)
    rng = np.random.default_rng(0)
    seqs, pls, split = [], [], []
    for i in range(40):
        p, r = int(rng.integers(5, 20)), int(rng.integers(3, 60))
        seqs.append(rng.integers(3, 512, p + r).astype(np.int32))
        pls.append(p)
        split.append(1 if i >= 32 else 0)
    off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    np.savez(path, tokens=np.concatenate(seqs), offsets=off, prompt_lens=np.array(pls, np.int32),
             split=np.array(split, np.int32), temperature=np.zeros(len(seqs), np.float32),
             prompt_index=np.arange(len(seqs), dtype=np.int32))
    return target


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(HERE, "work", "smollm2"), help="target HF folder")
    p.add_argument("--data", default=os.path.join(HERE, "work", "responses.npz"))
    p.add_argument("--out", default=os.path.join(HERE, "work", "draft"))
    p.add_argument("--ckpt", default=os.path.join(HERE, "work", "ckpt.pt"))
    p.add_argument("--resume", action="store_true", help="continue from --ckpt, else from --init-from")
    p.add_argument("--init-from", help="a draft folder whose weights start the run (default with --resume: --out)")
    p.add_argument("--max-seconds", type=float, default=480.0, help="stop (and save) after this wall time")
    p.add_argument("--total-steps", type=int, default=6000, help="length of the cosine schedule")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps of this run (0 = none)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gamma", type=float, default=0.0, help="loss decay; 0 = 7 for BS 16, 5 for 10, 4 for 8")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate-size", type=int, default=0, help="0 = the target's")
    p.add_argument("--num-taps", type=int, default=5)
    p.add_argument("--taps", help="explicit comma list of target layers (overrides --num-taps)")
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--anchors", type=int, default=16, help="anchors (blocks) per sequence per step")
    p.add_argument("--kd-weight", type=float, default=0.0,
                   help="weight of KL(target || draft) against the CE on the response tokens (0 = the paper's "
                        "CE only); the held-out loss stays the CE, comparable across runs")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--save-every-seconds", type=float, default=180.0)
    p.add_argument("--shard-mib", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", help="cuda (bf16 autocast) or cpu (float32: smoke tests)")
    p.add_argument("--dry-run", action="store_true", help="tiny random target and data on the CPU")
    p.add_argument("--check", action="store_true", help="torch-free unit checks only")
    a = p.parse_args()
    if not 0.0 <= a.kd_weight <= 1.0:
        raise SystemExit(f"--kd-weight {a.kd_weight} must be in [0, 1]")
    if a.check:
        check_pure()
        return

    import torch
    t_start = time.time()
    log_lines = []

    def log(s):
        print(s, flush=True)
        log_lines.append(s)

    if a.gamma <= 0:
        a.gamma = {16: 7.0, 10: 5.0, 8: 4.0}.get(a.block_size, a.block_size / 2.3)
    if a.dry_run:
        import tempfile
        tmp = tempfile.mkdtemp(prefix="dflash_dry_")
        a.data, a.ckpt = os.path.join(tmp, "data.npz"), os.path.join(tmp, "ckpt.pt")
        if a.out == os.path.join(HERE, "work", "draft"):
            a.out = os.path.join(tmp, "draft")
        target = tiny_target_and_data(a.data, a.block_size)
        a.layers, a.heads, a.kv_heads, a.num_taps = 2, 2, 1, 2
        a.batch, a.anchors, a.warmup, a.eval_every = 4, 3, 2, 4
        a.total_steps = a.max_steps = a.max_steps or 8
        device, compute_dtype = "cpu", torch.float32
    else:
        from transformers import AutoModelForCausalLM
        device = a.device
        compute_dtype = torch.bfloat16 if device == "cuda" else torch.float32
        torch.backends.cuda.matmul.allow_tf32 = True
        target = AutoModelForCausalLM.from_pretrained(a.model, dtype=compute_dtype)
    target = target.to(device).eval()
    for q in target.parameters():
        q.requires_grad_(False)
    tcfg = target.config
    cfg = draft_config(tcfg, a)
    if a.dry_run and a.taps is None:
        cfg["dflash_config"]["target_layer_ids"] = [1, tcfg.num_hidden_layers - 1]  # the hooked last layer too
    taps_ids = cfg["dflash_config"]["target_layer_ids"]
    log(f"target {a.model if not a.dry_run else 'tiny random'}: {tcfg.num_hidden_layers} layers, hidden "
        f"{tcfg.hidden_size}; draft {a.layers} layers, taps {taps_ids}, block {a.block_size}, gamma {a.gamma}")

    emb_w = target.get_input_embeddings().weight
    draft = build_draft(cfg, emb_w.float().mean(0))
    draft.init_weights(a.seed)
    draft = draft.to(device)
    params = [q for n_, q in draft.named_parameters()]
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, history, evals = 0, [], []
    init_from = a.init_from or (a.out if a.resume else None)
    if a.resume and not os.path.exists(a.ckpt) and not os.path.exists(os.path.join(init_from, "config.json")):
        raise SystemExit(f"--resume: neither {a.ckpt} nor a draft in {init_from}; carry the last draft "
                         "folder and pass --init-from, or drop --resume to start fresh")
    if a.resume and os.path.exists(a.ckpt):
        ck = torch.load(a.ckpt, map_location=device)
        if ck["config"] != cfg:
            raise SystemExit(f"{a.ckpt} was trained with another draft config; remove it or change the flags")
        draft.load_state_dict(ck["draft"], strict=False)
        opt.load_state_dict(ck["opt"])
        step, history, evals = ck["step"], ck.get("history", []), ck.get("evals", [])
        log(f"resumed from {a.ckpt} at step {step} (weights and AdamW state)")
    elif init_from:
        with open(os.path.join(init_from, "config.json")) as f:
            old_cfg = json.load(f)
        # The block size shapes no weight (it sets the training masks and the runtime's block),
        # so a draft trained at one block size can start the training at another (--block-size 8
        # from the 16-block draft); every other field must match.
        if {**old_cfg, "block_size": cfg["block_size"]} != cfg:
            raise SystemExit(f"{init_from}/config.json differs from the draft these flags build")
        if old_cfg.get("block_size") != cfg["block_size"]:
            log(f"block size {old_cfg.get('block_size')} in {init_from} -> {cfg['block_size']}: "
                "same weights, new masks")
        load_draft_into(draft, init_from)
        logp = os.path.join(init_from, "train_log.json")
        if os.path.exists(logp):
            with open(logp) as f:
                old = json.load(f)
            step, history, evals = old.get("step", 0), old.get("history", []), old.get("evals", [])
        log(f"started from the weights in {init_from} at step {step} (fresh AdamW state: "
            f"{min(a.warmup, 100)} steps of re-warm-up)")
        a.rewarm_from = step
    rewarm_from = getattr(a, "rewarm_from", None)
    if step >= a.total_steps:
        # The schedule counts from step 0 of the first run: a continued draft needs a longer one.
        raise SystemExit(f"--total-steps {a.total_steps} is not past the starting step {step} "
                         f"(from {a.ckpt if a.resume and os.path.exists(a.ckpt) else init_from}): "
                         "nothing would be trained; pass a larger --total-steps")

    train, held = Data(a.data, 0), Data(a.data, 1)
    if not len(train):
        raise SystemExit(f"{a.data}: no training sequences")
    log(f"data {a.data}: {len(train)} training, {len(held)} held-out sequences, "
        f"mean length {np.mean([len(s) for s in train.seqs]):.0f}")
    taps = Taps(target, taps_ids)
    pad = int(tcfg.pad_token_id if tcfg.pad_token_id is not None else 0)
    rng = random.Random(a.seed * 1000 + step)
    held_rng = random.Random(12345)
    held_batches = []
    if len(held):
        hidx = list(range(len(held)))
        for s in range(0, min(len(hidx), 4 * a.batch), a.batch):
            held_batches.append(make_batch(held, hidx[s:s + a.batch], a.anchors, a.block_size, pad, held_rng, device))

    def evaluate():
        draft.eval()
        with torch.no_grad():
            losses, accs = [], []
            for hb in held_batches:
                loss, pred, labels = block_logits_loss(draft, target, taps, hb, a.gamma, compute_dtype)
                losses.append(float(loss))
                accs.append(accept_proxy(pred, labels))
        draft.train()
        return (float(np.mean(losses)) if losses else float("nan")), (float(np.nanmean(accs)) if accs else float("nan"))

    def save(final):
        written = save_draft(draft, cfg, a.out, a.shard_mib)
        state = {"step": step, "total_steps": a.total_steps, "history": history, "evals": evals,
                 "settings": {k: v for k, v in vars(a).items() if k not in ("rewarm_from",)},
                 "seconds_this_run": round(time.time() - t_start, 1), "final": final,
                 "data_sequences": {"train": len(train), "heldout": len(held)}}
        with open(os.path.join(a.out, "train_log.json"), "w") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
        torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "step": step, "config": cfg,
                    "history": history, "evals": evals}, a.ckpt + ".tmp")
        os.replace(a.ckpt + ".tmp", a.ckpt)
        log(f"saved step {step} to {a.out} ({', '.join(written)}) and {a.ckpt}")

    if a.dry_run:
        exact, shifted = check_kd_alignment(target, taps, make_batch(train, list(range(a.batch)), a.anchors,
                                                                     a.block_size, pad, random.Random(7), device),
                                            a.gamma)
        log(f"KD alignment check: KL {exact:.2e} at anchor + k - 1, {shifted:.3f} one position off")
    draft.train()
    order, pos = [], 0
    last_save, run_steps, t_loop = time.time(), 0, time.time()
    stop_reason = "total steps"
    while step < a.total_steps:
        if time.time() - t_start > a.max_seconds:
            stop_reason = "max seconds"
            break
        if a.max_steps and run_steps >= a.max_steps:
            stop_reason = "max steps"
            break
        if pos + a.batch > len(order):
            order, pos = list(range(len(train))), 0
            rng.shuffle(order)
        idx = order[pos:pos + a.batch]
        pos += a.batch
        lr = lr_at(step, a.total_steps, a.warmup, a.lr, a.min_lr_frac)
        if rewarm_from is not None and step - rewarm_from < min(a.warmup, 100):
            lr *= (step - rewarm_from + 1) / min(a.warmup, 100)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = make_batch(train, idx, a.anchors, a.block_size, pad, rng, device)
        loss, pred, labels = block_logits_loss(draft, target, taps, batch, a.gamma, compute_dtype, a.kd_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(draft.parameters(), a.clip))
        opt.step()
        step += 1
        run_steps += 1
        if step % 25 == 0 or step == 1:
            acc = accept_proxy(pred, labels)
            history.append({"step": step, "loss": round(float(loss.detach()), 4), "accept_proxy": round(acc, 3),
                            "lr": lr, "grad_norm": round(gn, 3), "t": round(time.time() - t_start, 1)})
            sps = run_steps / max(1e-6, time.time() - t_loop)
            log(f"step {step} loss {float(loss.detach()):.4f} accept-proxy {acc:.2f} lr {lr:.2e} |g| {gn:.2f} "
                f"({sps:.2f} steps/s)")
        if step % a.eval_every == 0 and held_batches:
            hl, ha = evaluate()
            evals.append({"step": step, "heldout_loss": round(hl, 4), "heldout_accept_proxy": round(ha, 3)})
            log(f"  held-out: loss {hl:.4f} accept-proxy {ha:.3f} (mean leading correct of {a.block_size - 1})")
        if time.time() - last_save > a.save_every_seconds:
            save(False)
            last_save = time.time()
    if held_batches:
        hl, ha = evaluate()
        evals.append({"step": step, "heldout_loss": round(hl, 4), "heldout_accept_proxy": round(ha, 3)})
        log(f"final held-out: loss {hl:.4f} accept-proxy {ha:.3f}; stopped: {stop_reason}")
    save(step >= a.total_steps)

    # The saved folder through the inference oracle (tools/dflash_reference.py), one anchor.
    src = held if len(held) else train
    i = 0
    ids_row = torch.from_numpy(src.seqs[i]).to(device)
    feats_row = taps(ids_row[None], torch.ones_like(ids_row)[None])[0]
    anchor = src.prompt_lens[i] + (len(src.seqs[i]) - src.prompt_lens[i]) // 2
    anchor = min(anchor, len(src.seqs[i]) - 2)
    agree, err = reference_check(draft, cfg, target, feats_row[:anchor], ids_row.cpu(), anchor, a.out, compute_dtype)
    log(f"oracle check (tools/dflash_reference.py on the saved folder vs the training forward, f32): "
        f"argmax agreement {agree:.3f}, max |logit diff| / scale {err:.2e}")
    with open(os.path.join(a.out, "train_log.json")) as f:
        state = json.load(f)
    state["oracle_check"] = {"argmax_agreement": agree, "max_rel_diff": err}
    state["log_tail"] = log_lines[-40:]
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(state, f, indent=1)
        f.write("\n")
    if err > 1e-3 or agree < 0.99:
        log("ORACLE CHECK FAILED: the training forward is not the inference forward")
        sys.exit(3)


if __name__ == "__main__":
    main()
