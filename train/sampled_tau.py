#!/usr/bin/env python3
"""Expected τ of a DFlash draft at temperature T > 0 for two proposal rules, in PyTorch: does
sampling the proposals from the draft pay?

    python3 train/sampled_tau.py --model train/work/smollm2 \
        --draft models/smollm2-135m-instruct-dflash [--limit 24] [--json out.json]

The runtime proposes the draft's argmax (q = one-hot, spec §3.7): token k of a block is accepted
with probability α_k = p_k(argmax q_k). Drawing the proposal from q instead accepts it with
probability α_k = Σ_x min(p_k(x), q_k(x)) (the residual keeps the output distributed as p). Both
are evaluated on the same anchors of continuations that the target itself samples at T from
held-out prompts: p_k is the target's distribution for the block's k-th token given the
continuation so far (one teacher-forced forward), q_k the draft's (softmax of its logits at T),
and a block yields 1 + Σ_k Π_{j<=k} α_j tokens in expectation (the bonus or residual token
included). Conditioning on the target's own continuation instead of the accepted prefix is the
same approximation for both rules, so the comparison is fair; the argmax rule's figure can be
checked against the runtime's measured τ (docs/perf.md).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_responses as gr  # noqa: E402
import train_dflash as td  # noqa: E402


def expected_tokens(alpha):
    """1 + Σ_k Π_{j<=k} α_j over the block's draft rows; alpha [A, BS-1] -> [A]."""
    return 1.0 + np.cumprod(alpha, axis=1).sum(axis=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(HERE, "work", "smollm2"))
    p.add_argument("--draft", default=os.path.join(HERE, "..", "models", "smollm2-135m-instruct-dflash"))
    p.add_argument("--prompts", default=os.path.join(HERE, "data", "prompts_heldout.jsonl"))
    p.add_argument("--limit", type=int, default=24, help="held-out prompts")
    p.add_argument("--new", type=int, default=128, help="tokens the target samples per prompt")
    p.add_argument("--stride", type=int, default=2, help="anchors every this many tokens")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", help="write the result here")
    a = p.parse_args()
    if a.temperature <= 0:
        raise SystemExit(f"--temperature = {a.temperature} must be > 0 (T = 0 is train/eval_tau.py)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(a.seed)
    tok = AutoTokenizer.from_pretrained(a.model)
    target = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg, draft, taps = td.open_draft(a.draft, target)
    BS = cfg["block_size"]
    draft = draft.eval()
    emb = target.get_input_embeddings().weight
    lm_head = target.get_output_embeddings().weight
    prompts = gr.read_prompts(a.prompts)[:a.limit]
    T = a.temperature
    per_rule = {"argmax": [], "sampled": []}
    with torch.no_grad():
        for prompt_ids in gr.encode(tok, prompts):
            ids = torch.tensor([prompt_ids])
            out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                  temperature=T, top_k=0, top_p=1.0, max_new_tokens=a.new,
                                  eos_token_id=eos, pad_token_id=eos)
            seq = out[0]
            N, P = seq.numel(), len(prompt_ids)
            anchors = list(range(P, N - BS, a.stride))
            if not anchors:
                continue
            ids = seq[None, :]
            attn = torch.ones_like(ids)
            probs = torch.softmax(target(ids, attention_mask=attn).logits[0].float() / T, dim=-1)  # [N, V]
            feats = taps(ids, attn)
            an = torch.tensor(anchors)
            A = len(anchors)
            # All anchors' blocks in one draft forward (each sees the context before its anchor).
            h = draft(feats, attn.sum(1), emb[seq[an]][None], an[None]).reshape(A, BS, -1)
            q = torch.softmax(torch.nn.functional.linear(h, lm_head).float()[:, 1:] / T, dim=-1)  # [A, BS-1, V]
            # The block's k-th token sits at a0 + k: the target predicts it at position a0 + k - 1.
            rows = an[:, None] + torch.arange(BS - 1)[None, :]  # [A, BS-1]
            pk = probs[rows]  # [A, BS-1, V]
            alpha_argmax = pk.gather(-1, q.argmax(-1, keepdim=True))[..., 0]
            alpha_sampled = torch.minimum(pk, q).sum(-1)
            per_rule["argmax"].extend(expected_tokens(alpha_argmax.numpy()).tolist())
            per_rule["sampled"].extend(expected_tokens(alpha_sampled.numpy()).tolist())
    if not per_rule["argmax"]:
        raise SystemExit("no anchors: every continuation was shorter than a block")
    result = {"draft": a.draft, "temperature": T, "prompts": len(prompts), "anchors": len(per_rule["argmax"]),
              "block_size": BS, "tau_argmax_proposals": float(np.mean(per_rule["argmax"])),
              "tau_sampled_proposals": float(np.mean(per_rule["sampled"]))}
    td.print_report(result, a.json)


if __name__ == "__main__":
    main()
