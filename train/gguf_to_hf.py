#!/usr/bin/env python3
"""Dequantize the default model's GGUF (llama architecture; F32/F16/BF16/Q8_0/Q4_0/Q4_1 tensors)
into a Hugging Face LlamaForCausalLM folder with numpy only, so the GPU machine needs no edgespec
build before training.

    python3 train/gguf_to_hf.py GGUF OUT_DIR [--dtype bf16|f32] [--tokenizer-dir DIR]
    python3 train/gguf_to_hf.py GGUF --verify HF_DIR     # compare with `edgespec convert`'s folder

OUT_DIR gets config.json, model.safetensors (bf16 by default, round-to-nearest-even from the f32
dequantization, as `edgespec convert`) and, with --tokenizer-dir, that folder's tokenizer.json,
tokenizer_config.json and generation_config.json (transformers needs them; this script does not
rebuild a tokenizer from the GGUF metadata). llama.cpp stores q_proj/k_proj rows permuted for its
interleaved RoPE; they are un-permuted here (checked by --verify against `edgespec convert`).
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 3, 8, 30
# bytes per block, elements per block
BLOCK = {GGML_F32: (4, 1), GGML_F16: (2, 1), GGML_BF16: (2, 1), GGML_Q4_0: (18, 32),
         GGML_Q4_1: (20, 32), GGML_Q8_0: (34, 32)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def unpack(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.unpack("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.unpack(SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.unpack("<I"), self.unpack("<Q")
            if n > 4096:  # token lists: skip the values, keep the count
                for _ in range(n):
                    self.value(et)
                return f"<array of {n}>"
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")


def read_gguf(path):
    """(metadata dict, {name: (ggml_type, hf_shape, raw bytes view)})"""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    r = Reader(buf)
    if bytes(buf[:4]) != b"GGUF":
        raise SystemExit(f"{path} is not a GGUF file")
    r.pos = 4
    version = r.unpack("<I")
    if version < 2:
        raise SystemExit(f"GGUF version {version} is not supported")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.unpack("<I")
        dims = [r.unpack("<Q") for _ in range(nd)]
        t, off = r.unpack("<I"), r.unpack("<Q")
        infos.append((name, t, dims, off))
    align = int(meta.get("general.alignment", 32))
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, t, dims, off in infos:
        if t not in BLOCK:
            raise SystemExit(f"tensor {name}: ggml type {t} is not supported (F32/F16/BF16/Q8_0/Q4_0/Q4_1)")
        n = int(np.prod(dims))
        bb, be = BLOCK[t]
        if n % be:
            raise SystemExit(f"tensor {name}: {n} elements is not a multiple of the block {be}")
        nbytes = n // be * bb
        tensors[name] = (t, list(reversed(dims)), buf[base + off: base + off + nbytes])
    return meta, tensors


def dequantize(t, raw, n):
    """float32 [n] from raw bytes of ggml type t."""
    if t == GGML_F32:
        return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float32)
    if t == GGML_F16:
        return np.frombuffer(raw, dtype="<f2", count=n).astype(np.float32)
    if t == GGML_BF16:
        u = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
        return u.view(np.float32)
    blocks = np.asarray(raw).reshape(-1, BLOCK[t][0])
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)  # [nb, 1]
    if t == GGML_Q8_0:
        q = blocks[:, 2:34].copy().view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)
    if t == GGML_Q4_0:
        qs = blocks[:, 2:18]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
        return (q * d).reshape(-1)
    if t == GGML_Q4_1:
        m = blocks[:, 2:4].copy().view("<f2").astype(np.float32)
        qs = blocks[:, 4:20]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        return (q * d + m).reshape(-1)
    raise SystemExit(f"ggml type {t} is not supported")


def unpermute(w, n_head):
    """Inverse of llama.cpp's permute(w, n_head): rows [n_head, 2, D/2] -> [n_head, D/2, 2]."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest even (NaN kept a NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def hf_weights(meta, tensors):
    """{hf name: float32 array} and the HF config dict."""
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise SystemExit(f"architecture {arch!r}: this converter covers llama (SmolLM2) only")
    g = lambda k, d=None: meta.get(f"llama.{k}", d)  # noqa: E731
    n_layers, H = int(g("block_count")), int(g("embedding_length"))
    n_head, n_kv = int(g("attention.head_count")), int(g("attention.head_count_kv", g("attention.head_count")))
    tok = tensors["token_embd.weight"][1]
    tied = "output.weight" not in tensors
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "mlp_bias": False, "hidden_act": "silu", "hidden_size": H,
        "intermediate_size": int(g("feed_forward_length")), "num_hidden_layers": n_layers,
        "num_attention_heads": n_head, "num_key_value_heads": n_kv, "head_dim": H // n_head,
        "max_position_embeddings": int(g("context_length", 8192)),
        "rms_norm_eps": float(str(np.float32(g("attention.layer_norm_rms_epsilon", 1e-5)))),
        "rope_theta": float(g("rope.freq_base", 10000.0)), "vocab_size": int(tok[0]),
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
        "bos_token_id": int(meta.get("tokenizer.ggml.bos_token_id", 1)),
        "eos_token_id": int(meta.get("tokenizer.ggml.eos_token_id", 2)),
        "pad_token_id": int(meta.get("tokenizer.ggml.padding_token_id", meta.get("tokenizer.ggml.eos_token_id", 2))),
    }
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
                 "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(n_layers):
        for k, v in per_layer.items():
            names[f"blk.{i}.{k}.weight"] = f"model.layers.{i}.{v}.weight"
    out = {}
    for gname, (t, shape, raw) in tensors.items():
        if gname not in names:
            if gname.startswith("rope_freqs"):
                continue
            raise SystemExit(f"unexpected GGUF tensor {gname}")
        w = dequantize(t, raw, int(np.prod(shape))).reshape(shape)
        if gname.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif gname.endswith("attn_k.weight"):
            w = unpermute(w, n_kv)
        out[names[gname]] = w
    return out, config


def save_safetensors(path, arrays, dtype):
    """Minimal safetensors writer (bf16 or f32), names sorted, 8-byte aligned header."""
    header, blobs, off = {}, [], 0
    for name in sorted(arrays):
        a = arrays[name]
        data = to_bf16_bits(a).tobytes() if dtype == "bf16" else np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def load_safetensors_f32(path):
    """{name: float32 array} from a safetensors file (F32/F16/BF16), numpy only."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = buf[base + a: base + b]
        dt = info["dtype"]
        if dt == "BF16":
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            x = np.frombuffer(raw, "<f2").astype(np.float32)
        elif dt == "F32":
            x = np.frombuffer(raw, "<f4").astype(np.float32)
        else:
            raise SystemExit(f"{path}: {name} has dtype {dt}")
        out[name] = x.reshape(info["shape"])
    return out


def verify(weights, config, hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        want_cfg = json.load(f)
    bad = [f"config {k}: {config[k]} vs {want_cfg.get(k)}" for k in
           ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "tie_word_embeddings", "rope_theta", "rms_norm_eps")
           if config[k] != want_cfg.get(k)]
    ref = load_safetensors_f32(os.path.join(hf_dir, "model.safetensors"))
    if set(ref) != set(weights):
        bad.append(f"tensor names differ: only here {sorted(set(weights) - set(ref))[:5]}, "
                   f"only there {sorted(set(ref) - set(weights))[:5]}")
    worst = 0.0
    for name in sorted(set(ref) & set(weights)):
        mine = (to_bf16_bits(weights[name]).astype(np.uint32) << 16).view(np.float32)
        if mine.shape != ref[name].shape:
            bad.append(f"{name}: shape {mine.shape} vs {ref[name].shape}")
            continue
        err = float(np.max(np.abs(mine - ref[name]))) / max(1e-12, float(np.max(np.abs(ref[name]))))
        worst = max(worst, err)
        if err > 0:
            bad.append(f"{name}: max relative difference {err:.3g}")
    for line in bad[:20]:
        print("MISMATCH", line)
    print(f"verify: {len(weights)} tensors, worst relative difference {worst:.3g}:",
          "FAILED" if bad else "bit-identical to", hf_dir)
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("gguf")
    p.add_argument("out_dir", nargs="?")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--tokenizer-dir", help="copy tokenizer.json, tokenizer_config.json, generation_config.json from here")
    p.add_argument("--verify", metavar="HF_DIR", help="compare with a folder written by `edgespec convert` (bf16)")
    a = p.parse_args()
    meta, tensors = read_gguf(a.gguf)
    weights, config = hf_weights(meta, tensors)
    if a.verify:
        sys.exit(verify(weights, config, a.verify))
    if not a.out_dir:
        p.error("OUT_DIR is required unless --verify")
    os.makedirs(a.out_dir, exist_ok=True)
    save_safetensors(os.path.join(a.out_dir, "model.safetensors"), weights, a.dtype)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    if a.tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
            src = os.path.join(a.tokenizer_dir, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(a.out_dir, name))
    print(f"{a.gguf} -> {a.out_dir}: {len(weights)} tensors ({a.dtype})")


if __name__ == "__main__":
    main()
