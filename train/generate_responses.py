#!/usr/bin/env python3
"""Generate the DFlash training data on the GPU machine: the default model's own responses to the
prompt sets of train/data (transformers, bf16, cuda, left padding, large batches).

    python3 train/generate_responses.py --model train/work/smollm2 --out train/work/responses.npz
    python3 train/generate_responses.py --dry-run     # tiny random model on the CPU, seconds

Per training prompt: one greedy response, plus --sampled-rounds responses sampled at temperature 1
(no top-k / top-p; a different seed per round). Per held-out prompt: one greedy response (eval_tau.py follows it).
Responses end at the first EOS (<|im_end|>, kept as the last token) or after --max-new-tokens.

Output (.npz, uncompressed): tokens [sum of lengths] (prompt + response, flat; uint16 when every
id fits, as SmolLM2's 49,152 do, else int32: half the bytes to carry back from the GPU machine),
offsets [N + 1] (int64), prompt_lens [N], split [N] (0 train, 1 held-out), temperature [N]
(float32), prompt_index [N]; and a .json summary next to it.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def read_prompts(path):
    opener = gzip.open if path.endswith(".gz") else open  # big prompt sets travel gzipped
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["prompt"] for line in f if line.strip()]


def encode(tok, prompts):
    """Chat-templated token ids (the template's own special tokens, no extra BOS)."""
    out = []
    for p in prompts:
        text = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                       add_generation_prompt=True)
        out.append(tok(text, add_special_tokens=False)["input_ids"])
    return out


def generate(model, prompts_ids, eos, pad, batch, max_new, sample, seed, device, log, deadline=None):
    """List of response id lists (EOS included when produced), in the order of prompts_ids; None
    for prompts left when `deadline` (time.time()) passed before their batch started."""
    import torch
    order = sorted(range(len(prompts_ids)), key=lambda i: len(prompts_ids[i]))
    out = [None] * len(prompts_ids)
    for s in range(0, len(order), batch):
        if deadline is not None and time.time() > deadline:
            log(f"  deadline: {len(order) - s} prompts not generated")
            break
        idx = order[s:s + batch]
        width = max(len(prompts_ids[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):  # left padding
            p = prompts_ids[i]
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        torch.manual_seed(seed + s)
        kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
        t0 = time.time()
        with torch.no_grad():
            gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad, **kw)
        gen = gen[:, width:].cpu().tolist()
        for r, i in enumerate(idx):
            g = gen[r]
            if eos in g:
                g = g[:g.index(eos) + 1]
            out[i] = g
        log(f"  batch {s // batch}: {len(idx)} prompts, width {width}, {'sampled' if sample else 'greedy'}, "
            f"{time.time() - t0:.1f} s")
    return out


def tiny_model_and_tokenizer():
    """A random 2-layer Llama and a byte-level stand-in tokenizer, for --dry-run on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM
    import torch
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                      max_position_embeddings=1024, eos_token_id=2, pad_token_id=2, bos_token_id=1)
    model = LlamaForCausalLM(cfg).eval()

    class ByteTok:
        def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
            return "<u>" + msgs[0]["content"][:40] + "<a>"

        def __call__(self, text, add_special_tokens):
            return {"input_ids": [3 + b for b in text.encode()[:60]]}
    return model, ByteTok(), 2, 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(HERE, "work", "smollm2"))
    p.add_argument("--train-prompts", default=os.path.join(HERE, "data", "prompts_train.jsonl"))
    p.add_argument("--heldout-prompts", default=os.path.join(HERE, "data", "prompts_heldout.jsonl"))
    p.add_argument("--out", default=os.path.join(HERE, "work", "responses.npz"))
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--sampled-rounds", type=int, default=2, help="sampled (T=1) responses per training prompt")
    p.add_argument("--limit", type=int, default=0, help="use only the first N prompts of each set (testing)")
    p.add_argument("--skip-train", type=int, default=0,
                   help="skip the first N training prompts (their responses are in an earlier file)")
    p.add_argument("--take", type=int, default=0,
                   help="then use only the next N training prompts (0 = all the rest)")
    p.add_argument("--no-heldout", action="store_true", help="no held-out responses (an extra training file)")
    p.add_argument("--max-seconds", type=float, default=0,
                   help="start no batch after this many seconds; prompts left out are not in the file (0 = none)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cuda", help="cuda (bf16) or cpu (float32: smoke tests)")
    p.add_argument("--dry-run", action="store_true", help="tiny random model on the CPU")
    a = p.parse_args()
    import torch

    t_start = time.time()
    log = lambda s: print(s, flush=True)  # noqa: E731
    train_p, held_p = read_prompts(a.train_prompts), read_prompts(a.heldout_prompts)
    if a.dry_run:
        train_p, held_p = train_p[:6], held_p[:3]
        a.max_new_tokens, a.batch = min(a.max_new_tokens, 12), 4
        model, tok, eos, pad = tiny_model_and_tokenizer()
        device = "cpu"
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        if a.limit:
            train_p, held_p = train_p[:a.limit], held_p[:a.limit]
        device = a.device
        tok = AutoTokenizer.from_pretrained(a.model)
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).to(device).eval()
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        pad = model.config.pad_token_id if model.config.pad_token_id is not None else eos
        if eos is None or eos < 0:
            sys.exit("the tokenizer has no <|im_end|> token")
        log(f"model {a.model}: eos {eos}, pad {pad}, loaded in {time.time() - t_start:.1f} s")
    train_p = train_p[a.skip_train:]
    if a.take > 0:
        train_p = train_p[:a.take]
    if a.no_heldout:
        held_p = []
    train_ids, held_ids = encode(tok, train_p), encode(tok, held_p)
    every = [a.skip_train + i for i in range(len(train_ids))]  # prompt_index: line in the prompt file
    jobs = [("train greedy", train_ids, every, 0, False, a.seed)]
    jobs += [(f"train sampled {r}", train_ids, every, 0, True, a.seed + 100003 * (r + 1)) for r in range(a.sampled_rounds)]
    jobs += [("held-out greedy", held_ids, list(range(len(held_ids))), 1, False, a.seed)]
    tokens, offsets, prompt_lens, split, temp, pidx = [], [0], [], [], [], []
    summary = {"model": a.model, "max_new_tokens": a.max_new_tokens, "batch": a.batch, "seed": a.seed,
               "sampled_rounds": a.sampled_rounds, "jobs": {}}
    for name, ids, index, sp, sample, seed in jobs:
        if not ids:
            continue
        t0 = time.time()
        log(f"{name}: {len(ids)} prompts")
        deadline = t_start + a.max_seconds if a.max_seconds > 0 else None
        resp = generate(model, ids, eos, pad, a.batch, a.max_new_tokens, sample, seed, device, log, deadline)
        kept = [k for k, r in enumerate(resp) if r is not None]
        ids, resp, index = [ids[k] for k in kept], [resp[k] for k in kept], [index[k] for k in kept]
        if not ids:
            continue
        for p_ids, r_ids, i in zip(ids, resp, index):
            seq = list(p_ids) + list(r_ids)
            tokens.extend(seq)
            offsets.append(offsets[-1] + len(seq))
            prompt_lens.append(len(p_ids))
            split.append(sp)
            temp.append(1.0 if sample else 0.0)
            pidx.append(i)
        lens = [len(r) for r in resp]
        summary["jobs"][name] = {"sequences": len(ids), "seconds": round(time.time() - t0, 1),
                                 "mean_response": float(np.mean(lens)),
                                 "ended_with_eos": int(sum(1 for r in resp if r and r[-1] == eos)),
                                 "new_tokens": int(sum(lens))}
        log(f"{name}: {summary['jobs'][name]}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    token_dtype = np.uint16 if not tokens or max(tokens) < 65536 else np.int32
    # Compressed: the responses repeat a lot (a 40,000-response file is ~4 MB instead of 17 MB), so
    # a whole call's output comes back under the device's 16 MiB per file.
    np.savez_compressed(a.out, tokens=np.asarray(tokens, token_dtype), offsets=np.asarray(offsets, np.int64),
             prompt_lens=np.asarray(prompt_lens, np.int32), split=np.asarray(split, np.int32),
             temperature=np.asarray(temp, np.float32), prompt_index=np.asarray(pidx, np.int32))
    summary["seconds"] = round(time.time() - t_start, 1)
    summary["bytes"] = os.path.getsize(a.out)
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    log(f"wrote {a.out} ({summary['bytes']} bytes) in {summary['seconds']} s")


if __name__ == "__main__":
    main()
