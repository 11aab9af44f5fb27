#!/usr/bin/env python3
"""Greedy tokens of edgespec against transformers, on the same HF folder and the same prompt ids.

  python3 tools/hf_greedy_check.py --model HF_DIR ES_JSON [ES_JSON ...]
        [--prompt TEXT ...] [--tie-threshold 0.5] [--report REPORT.json]

HF_DIR is a Hugging Face folder (e.g. `edgespec convert X.gguf HF_DIR --dtype f32`); each ES_JSON
holds the one-line output of `edgespec generate --json ...` (greedy), which carries the prompt
ids (`prompt_ids`), the stop ids (`stop_ids`) and the generated `tokens`. For each file,
transformers decodes greedily from exactly those prompt ids, in float32 on CUDA (CPU when no GPU),
for as many new tokens as edgespec was asked for (--max-new-tokens, default: the number edgespec
produced unless it stopped early, then 64), stopping at the same stop ids. Reported per prompt:

  * the identical prefix length and the first divergence (step, edgespec token, HF token);
  * whether the divergence is a near-tie: in the transformers run at that step, the logit of
    HF's token minus the logit of edgespec's token is below --tie-threshold (bf16 on the GPU
    against fp32 here moves logits by a few hundredths to tenths, enough to flip a near tie;
    after a flip the two continuations are unrelated, so nothing after it is compared);
  * with --prompt (one per file, same order): whether transformers' apply_chat_template gives
    the same prompt ids as edgespec's tokenizer + chat template (a tokenizer check).

Exit status: 0 when every prompt matches or diverges only at a near-tie, 1 on a real mismatch
(a divergence with a clear margin, a prompt-id mismatch, or a step where transformers' own
greedy choice is not the argmax of its logits), 2 on bad input.
"""
import argparse
import json
import sys


def load_edgespec(path):
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip().startswith("{")]
    if not lines:
        raise ValueError(f"{path}: no JSON object (expected `edgespec generate --json` output)")
    out = json.loads(lines[-1])
    for key in ("tokens", "prompt_ids", "stop_ids", "finish_reason"):
        if key not in out:
            raise ValueError(f"{path}: field '{key}' missing (edgespec too old? it needs prompt_ids/stop_ids)")
    return out


def chat_ids(tokenizer, prompt):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


def hf_greedy(model, torch, device, prompt_ids, max_new, stop_ids):
    """Greedy tokens and the raw logits of every step (float32, on the CPU)."""
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False, num_beams=1,
                             max_new_tokens=max_new, min_new_tokens=0, eos_token_id=stop_ids or None,
                             pad_token_id=(stop_ids or [0])[0], repetition_penalty=1.0, temperature=None,
                             top_p=None, top_k=None, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt_ids):].tolist()
    logits = [step[0].float().cpu() for step in out.logits]
    return tokens[:len(logits)], logits


def compare(es_tokens, hf_tokens, logits, tie_threshold):
    """Identical prefix, first divergence and its margin in the transformers run."""
    n = min(len(es_tokens), len(hf_tokens))
    prefix = next((i for i in range(n) if es_tokens[i] != hf_tokens[i]), n)
    r = {"identical_prefix": prefix, "edgespec_len": len(es_tokens), "hf_len": len(hf_tokens)}
    # Transformers' own choices must be the argmax of its logits (no hidden processor).
    bad = [i for i, t in enumerate(hf_tokens) if int(logits[i].argmax()) != t and
           float(logits[i][t]) < float(logits[i].max())]
    if bad:
        r["hf_not_argmax_at"] = bad[:5]
    if prefix == len(es_tokens) == len(hf_tokens):
        r["status"] = "match"
        return r
    if prefix == n:  # one stopped (or ran out) where the other went on
        r["divergence"] = {"step": prefix, "edgespec": es_tokens[prefix] if prefix < len(es_tokens) else None,
                           "hf": hf_tokens[prefix] if prefix < len(hf_tokens) else None}
        r["status"] = "length-mismatch"
        return r
    step_logits = logits[prefix]
    top2 = step_logits.topk(2)
    gap_top2 = float(top2.values[0] - top2.values[1])
    margin = float(step_logits[hf_tokens[prefix]] - step_logits[es_tokens[prefix]])
    r["divergence"] = {"step": prefix, "edgespec": es_tokens[prefix], "hf": hf_tokens[prefix],
                       "hf_margin_over_edgespec_token": margin, "hf_top2_gap": gap_top2,
                       "edgespec_token_rank_in_hf": int((step_logits > step_logits[es_tokens[prefix]]).sum())}
    r["status"] = "near-tie" if margin < tie_threshold else "MISMATCH"
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF folder (config.json, model.safetensors, tokenizer files)")
    ap.add_argument("edgespec_json", nargs="+", help="outputs of `edgespec generate --json`")
    ap.add_argument("--prompt", action="append", default=[], help="the user message of each file, in order")
    ap.add_argument("--max-new-tokens", type=int, default=0,
                    help="tokens to decode (default: edgespec's count, 64 when it stopped early)")
    ap.add_argument("--tie-threshold", type=float, default=0.5,
                    help="a divergence whose logit margin in the HF run is below this is a near-tie")
    ap.add_argument("--report", help="write the per-prompt results as JSON here")
    args = ap.parse_args()
    if args.prompt and len(args.prompt) != len(args.edgespec_json):
        ap.error(f"--prompt given {len(args.prompt)} times for {len(args.edgespec_json)} files")
    try:
        runs = [load_edgespec(p) for p in args.edgespec_json]
    except (OSError, ValueError) as e:
        print(f"hf_greedy_check: {e}", file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        print("hf_greedy_check: no CUDA device, running transformers on the CPU", file=sys.stderr)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model) if args.prompt else None

    results, failed = [], False
    for i, (path, run) in enumerate(zip(args.edgespec_json, runs)):
        es_tokens = [int(t) for t in run["tokens"]]
        max_new = args.max_new_tokens or (len(es_tokens) if run["finish_reason"] == "length" else 64)
        hf_tokens, logits = hf_greedy(model, torch, device, run["prompt_ids"], max_new, run["stop_ids"])
        r = compare(es_tokens[:max_new], hf_tokens, logits, args.tie_threshold)
        r["file"] = path
        r["prompt_tokens"] = len(run["prompt_ids"])
        if args.prompt:
            hf_ids = chat_ids(tokenizer, args.prompt[i])
            r["prompt_ids_equal"] = hf_ids == run["prompt_ids"]
            if not r["prompt_ids_equal"]:
                r["hf_prompt_ids"] = hf_ids
        bad = r["status"] in ("MISMATCH", "length-mismatch") or "hf_not_argmax_at" in r or \
            r.get("prompt_ids_equal") is False
        failed |= bad
        d = r.get("divergence")
        line = (f"prompt {i}: {r['status']:<15} identical {r['identical_prefix']}/{len(es_tokens)} tokens"
                + (f", prompt ids {'equal' if r['prompt_ids_equal'] else 'DIFFER'}" if args.prompt else ""))
        if d and "hf_margin_over_edgespec_token" in d:
            line += (f"; step {d['step']}: edgespec {d['edgespec']} vs hf {d['hf']}, margin "
                     f"{d['hf_margin_over_edgespec_token']:.4f} (top-2 gap {d['hf_top2_gap']:.4f})")
        elif d:
            line += f"; step {d['step']}: edgespec {d['edgespec']} vs hf {d['hf']}"
        if "hf_not_argmax_at" in r:
            line += f"; transformers' token is not its argmax at steps {r['hf_not_argmax_at']}"
        print(line)
        results.append(r)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"model": args.model, "device": device, "tie_threshold": args.tie_threshold,
                       "results": results}, f, indent=2)
    print(f"hf_greedy_check: {'FAILED' if failed else 'ok'} ({len(results)} prompts)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
