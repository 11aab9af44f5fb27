#!/usr/bin/env python3
"""Reference last-token logits of a real-shape model folder (e.g. the random-weight Qwen3-0.6B that
torch_anchor.py --save writes), computed by transformers in float32 on the GPU, for
tests/model/test_real_model_gpu.cpp:

  python3 tools/real_model_reference.py MODEL_DIR     # writes MODEL_DIR/edgespec_reference.json
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    g = torch.Generator().manual_seed(11)
    prompt = torch.randint(0, model.config.vocab_size, (1, 200), generator=g)
    with torch.no_grad():
        logits = model(prompt.cuda()).logits[0, -1].float().cpu()
    top = torch.topk(logits, 2).values
    with open(f"{model_dir}/edgespec_reference.json", "w") as f:
        json.dump({"prompt": prompt[0].tolist(), "last_logits": logits.tolist(),
                   "top_margin": float(top[0] - top[1])}, f)
    print("reference written:", model_dir, "argmax", int(torch.argmax(logits)))


if __name__ == "__main__":
    main(sys.argv[1])
