#!/usr/bin/env python3
"""Held-out τ of a trained DFlash draft, in PyTorch (greedy, temperature 0), before the C++ runtime.

    python3 train/eval_tau.py --model train/work/smollm2 --draft train/work/draft \
        --data train/work/responses.npz [--json $OUT/tau.json]
    python3 train/eval_tau.py --dry-run       # tiny random target + draft on the CPU

Greedy speculative decoding accepts exactly the draft's leading tokens that equal the target's
greedy continuation, so it is replayed on the target's own greedy held-out responses (split 1 of
generate_responses.py's file): the first anchor is the first response token (position P = prompt
length, context = positions 0 … P-1, as after the runtime's prefill); the draft proposes rows
1 … BS-1; accepted = the leading rows equal to the response; the round commits accepted + 1
tokens (the bonus is the target's next token, which is the data), so the next anchor sits at
P' = P + accepted + 1. τ = mean tokens per round = mean(accepted + 1), counted until the anchor
reaches the response's last token (rounds near the end are capped by the remaining length, and
reported separately as well). The runtime's τ can differ a little: it decodes in bf16 with its own
kernels, so its greedy path can diverge from transformers' after a near-tie.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_dflash as td  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(HERE, "work", "smollm2"))
    p.add_argument("--draft", default=os.path.join(HERE, "work", "draft"))
    p.add_argument("--data", default=os.path.join(HERE, "work", "responses.npz"))
    p.add_argument("--split", type=int, default=1, help="1 = held-out greedy responses, 0 = training")
    p.add_argument("--limit", type=int, default=0, help="at most this many sequences")
    p.add_argument("--first", type=int, default=20,
                   help="also report τ over the first N sequences (the held-out prompts tools/draft_eval.py runs)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json", help="write the result here")
    p.add_argument("--device", default="cuda", help="cuda (bf16 autocast) or cpu (float32)")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args()
    import torch

    if a.dry_run:
        import subprocess
        import tempfile
        tmp = tempfile.mkdtemp(prefix="dflash_tau_dry_")
        subprocess.run([sys.executable, os.path.join(HERE, "train_dflash.py"), "--dry-run", "--out",
                        os.path.join(tmp, "draft")], check=True)
        a.draft, a.data = os.path.join(tmp, "draft"), os.path.join(tmp, "data.npz")
        target = td.tiny_target_and_data(a.data, 16)  # same seed: the same target and data
        device, dtype = "cpu", torch.float32
    else:
        from transformers import AutoModelForCausalLM
        device = a.device
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        target = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    target = target.to(device).eval()
    cfg, draft, taps = td.open_draft(a.draft, target)
    BS = cfg["block_size"]
    draft = draft.to(device).eval()  # fp32 weights + bf16 autocast, as in training
    data = td.Data(a.data, a.split)
    idx = [i for i in range(len(data)) if data.temperature[i] == 0.0]  # greedy responses only
    if a.limit:
        idx = idx[:a.limit]
    if not idx:
        raise SystemExit(f"{a.data}: no greedy sequences in split {a.split}")
    emb = target.get_input_embeddings().weight
    lm_head = target.get_output_embeddings().weight
    rounds_all, rounds_full, seq_rounds = [], [], []  # seq_rounds: each sequence's rounds, in idx order
    with torch.no_grad():
        for s in range(0, len(idx), a.batch):
            chunk = idx[s:s + a.batch]
            seqs = [torch.from_numpy(data.seqs[i]) for i in chunk]
            N = max(len(x) for x in seqs)
            ids = torch.full((len(chunk), N), 0, dtype=torch.long)
            attn = torch.zeros((len(chunk), N), dtype=torch.long)
            for b, x in enumerate(seqs):
                ids[b, :len(x)] = x
                attn[b, :len(x)] = 1
            ids, attn = ids.to(device), attn.to(device)
            feats = (taps(ids, attn) * attn[:, :, None]).to(dtype)
            lengths = attn.sum(1)
            anchor = [data.prompt_lens[i] for i in chunk]
            acc_seq = [[] for _ in chunk]
            while True:
                live = [b for b in range(len(chunk)) if anchor[b] < len(seqs[b]) - 1]
                if not live:
                    break
                lv = torch.tensor(live, device=device)
                an = torch.tensor([anchor[b] for b in live], device=device)
                with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
                    h = draft(feats[lv], lengths[lv], emb[ids[lv, an]].to(dtype)[:, None, :], an[:, None])
                    pred = torch.nn.functional.linear(h, lm_head).argmax(-1)  # [b, BS]; autocast: bf16 operands
                pred = pred.cpu().tolist()
                for r, b in enumerate(live):
                    x, a0 = seqs[b], anchor[b]
                    remaining = len(x) - 1 - a0               # tokens after the anchor
                    acc = 0
                    for k in range(1, BS):
                        if k > remaining or pred[r][k] != int(x[a0 + k]):
                            break
                        acc += 1
                    full = remaining >= BS                   # a round not capped by the end
                    rounds_all.append(acc + 1)
                    if full:
                        rounds_full.append(acc + 1)
                    acc_seq[b].append(acc + 1)
                    anchor[b] = a0 + acc + 1
            seq_rounds.extend(acc_seq)
    hist = np.bincount(np.asarray(rounds_all), minlength=BS + 1)[1:].tolist()
    per_seq = [float(np.mean(v)) for v in seq_rounds if v]
    first = [r for v in seq_rounds[:a.first] for r in v]
    result = {"draft": a.draft, "block_size": BS, "sequences": len(idx), "rounds": len(rounds_all),
              "tau": float(np.mean(rounds_all)), "tau_uncapped_rounds": float(np.mean(rounds_full)) if rounds_full else None,
              "tau_per_sequence_mean": float(np.mean(per_seq)),
              "first_sequences": min(a.first, len(idx)), "tau_first_sequences": float(np.mean(first)) if first else None,
              "tokens_per_round_histogram_1_to_BS": hist, "temperature": 0,
              # (tokens, rounds) of each of the first N sequences: per-prompt τ to set against the
              # runtime's (generate --one-at-a-time --json gives each request's accept histogram).
              "first_sequences_tokens_rounds": [[int(sum(v)), len(v)] for v in seq_rounds[:a.first]]}
    td.print_report(result, a.json)


if __name__ == "__main__":
    main()
