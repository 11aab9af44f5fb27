#!/usr/bin/env python3
"""Writes a Hugging Face Qwen3 folder as a GGUF file that llama.cpp and edgespec both load, with
the tokenizer taken from a llama.cpp vocab GGUF. Python 3 standard library only (no numpy, torch
or transformers: llama.cpp's convert_hf_to_gguf.py pins transformers 4.57 and needs the
model's tokenizer files, which the random-weight benchmark folders do not have).

    tools/hf_to_gguf.py convert MODEL_DIR OUT.gguf --vocab-gguf ggml-vocab-qwen2.gguf
    tools/hf_to_gguf.py tiny-hf OUT_DIR [--layers 2] [--hidden 256] [--vocab 151936] [--seed 0]

convert: the layout llama.cpp's converter gives a Qwen3 model: tensors under their GGUF names
(token_embd, blk.N.attn_q, ..., output), 2-D tensors in the folder's dtype (bf16, f16 or f32,
bytes copied unchanged), 1-D norms as f32, the qwen3.* hyperparameters, general.file_type from
the 2-D dtype. The tokenizer.* keys are copied from --vocab-gguf, its token list padded with
"[PADn]" tokens (type unused) up to the model's vocab_size as llama.cpp's converter pads it.
Every tensor is streamed from the safetensors files (one tensor in memory at a time).

tiny-hf: a random bf16 Qwen3 folder (config.json + model.safetensors, no tokenizer) for tests
and for a tokenizer carrier (convert it with the vocab, then `edgespec convert` the GGUF to get
tokenizer.json).
"""
import argparse
import json
import os
import random
import struct
import sys
from array import array

GGUF_MAGIC = b"GGUF"
ALIGN = 32
# GGUF metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
          T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
# ggml tensor types and the general.file_type of a file mostly in that type.
GGML = {"F32": 0, "F16": 1, "BF16": 30}
FILE_TYPE = {"F32": 0, "F16": 1, "BF16": 32}
TOKEN_TYPE_UNUSED = 5

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def fail(msg):
    print(f"hf_to_gguf: {msg}", file=sys.stderr)
    sys.exit(1)


# ---- GGUF metadata reading (for the vocab file) ----

class Reader:
    def __init__(self, data, path):
        self.d, self.p, self.path = data, 0, path

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if self.p + size > len(self.d):
            fail(f"{self.path}: truncated at byte {self.p}")
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += size
        return v

    def string(self):
        n = self.take("<Q")
        if self.p + n > len(self.d):
            fail(f"{self.path}: string of {n} bytes runs past the end")
        s = bytes(self.d[self.p:self.p + n])
        self.p += n
        return s

    def value(self, t):
        if t == T_STR:
            return self.string()
        if t == T_ARR:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        if t not in SCALAR:
            fail(f"{self.path}: metadata type {t} unknown")
        return self.take(SCALAR[t])


def read_gguf_metadata(path):
    """[(key, type, value)] of a GGUF file's metadata; strings stay bytes, arrays (elem, list)."""
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data, path)
    if data[:4] != GGUF_MAGIC:
        fail(f"--vocab-gguf {path}: not a GGUF file (magic {data[:4]!r})")
    r.p = 4
    version = r.take("<I")
    if version not in (2, 3):
        fail(f"--vocab-gguf {path}: GGUF version {version} (supported: 2, 3)")
    r.take("<Q")  # tensor count
    n_kv = r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string().decode()
        t = r.take("<I")
        kvs.append((key, t, r.value(t)))
    return kvs


# ---- GGUF writing ----

def pack_value(t, v):
    if t == T_STR:
        b = v if isinstance(v, bytes) else v.encode()
        return struct.pack("<Q", len(b)) + b
    if t == T_ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(pack_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def pack_kv(key, t, v):
    return pack_value(T_STR, key) + struct.pack("<I", t) + pack_value(t, v)


def pad(n):
    return (ALIGN - n % ALIGN) % ALIGN


def write_gguf(path, kvs, tensors):
    """tensors: [(name, ggml type, HF shape, nbytes, write(f))], written in order."""
    head = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(tensors), len(kvs))]
    head += [pack_kv(*kv) for kv in kvs]
    offset = 0
    for name, gtype, shape, nbytes, _ in tensors:
        dims = list(reversed(shape))  # GGUF lists the innermost dimension first
        head.append(pack_value(T_STR, name) + struct.pack("<I", len(dims)) +
                    b"".join(struct.pack("<Q", d) for d in dims) +
                    struct.pack("<IQ", gtype, offset))
        offset += nbytes + pad(nbytes)
    blob = b"".join(head)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob + b"\0" * pad(len(blob)))
        for _, _, _, nbytes, write in tensors:
            start = f.tell()
            write(f)
            if f.tell() - start != nbytes:
                fail(f"internal: tensor wrote {f.tell() - start} bytes, expected {nbytes}")
            f.write(b"\0" * pad(nbytes))
    os.replace(tmp, path)


# ---- safetensors ----

def safetensors_index(folder):
    """{name: (file, dtype, shape, begin, end)} over the folder's safetensors files."""
    files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        fail(f"MODEL_DIR {folder}: no *.safetensors files")
    index = {}
    for name in files:
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > 100 << 20:
                fail(f"{path}: header of {n} bytes (limit 100 MiB)")
            header = json.loads(f.read(n))
        base = 8 + n
        for k, v in header.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            index[k] = (path, v["dtype"], v["shape"], base + b, base + e)
    return index


def copier(path, begin, end):
    def write(f):
        with open(path, "rb") as src:
            src.seek(begin)
            left = end - begin
            while left:
                chunk = src.read(min(left, 64 << 20))
                if not chunk:
                    fail(f"{path}: ends inside a tensor")
                f.write(chunk)
                left -= len(chunk)
    return write


def to_f32_writer(path, dtype, begin, end):
    """Writes a small tensor as f32 (the norms)."""
    def write(f):
        with open(path, "rb") as src:
            src.seek(begin)
            raw = src.read(end - begin)
        if dtype == "F32":
            f.write(raw)
        elif dtype == "BF16":
            h = array("H", raw)
            f.write(array("I", (x << 16 for x in h)).tobytes())
        elif dtype == "F16":
            f.write(array("f", (struct.unpack("<e", raw[i:i + 2])[0]
                                for i in range(0, len(raw), 2))).tobytes())
        else:
            fail(f"{path}: dtype {dtype} unsupported")
    return write


def rope_theta(cfg, model):
    """RoPE base as edgespec reads config.json: rope_parameters (transformers 5) or rope_scaling,
    else the top-level rope_theta, else 10000; only unscaled (default) RoPE is written."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind != "default":
        fail(f"MODEL_DIR {model}: RoPE type '{kind}' is unsupported (supported: default)")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if "rope_theta" in params and "rope_theta" in cfg and params["rope_theta"] != cfg["rope_theta"]:
        fail(f"MODEL_DIR {model}: rope_theta {cfg['rope_theta']} and rope_parameters.rope_theta "
             f"{params['rope_theta']} disagree")
    return float(theta)


def convert(args):
    if sys.byteorder != "little":
        fail("this writer assumes a little-endian host")
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3":
        fail(f"MODEL_DIR {args.model}: model_type '{cfg.get('model_type')}' is unsupported "
             "(supported: qwen3)")
    index = safetensors_index(args.model)
    layers, vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    tied = cfg.get("tie_word_embeddings", False)
    theta = rope_theta(cfg, args.model)

    names = [("model.embed_tokens.weight", "token_embd.weight")]
    for i in range(layers):
        names += [(f"model.layers.{i}.{hf}", f"blk.{i}.{g}") for hf, g in LAYER_NAMES.items()]
    names.append(("model.norm.weight", "output_norm.weight"))
    if not tied:
        names.append(("lm_head.weight", "output.weight"))
    extra = set(index) - {hf for hf, _ in names} - ({"lm_head.weight"} if tied else set())
    if extra:
        fail(f"MODEL_DIR {args.model}: tensors this writer does not map: {sorted(extra)[:5]}")
    tensors, dtypes = [], set()
    for hf, g in names:
        if hf not in index:
            fail(f"MODEL_DIR {args.model}: tensor {hf} is missing")
        path, dtype, shape, b, e = index[hf]
        if dtype not in GGML:
            fail(f"{path}: {hf} has dtype {dtype} (supported: F32, F16, BF16)")
        if len(shape) == 1:
            tensors.append((g, GGML["F32"], shape, shape[0] * 4, to_f32_writer(path, dtype, b, e)))
        else:
            dtypes.add(dtype)
            tensors.append((g, GGML[dtype], shape, e - b, copier(path, b, e)))
    if len(dtypes) != 1:
        fail(f"MODEL_DIR {args.model}: 2-D tensors in several dtypes {sorted(dtypes)}")
    if index["model.embed_tokens.weight"][2][0] != vocab:
        fail(f"MODEL_DIR {args.model}: embed_tokens has {index['model.embed_tokens.weight'][2][0]} "
             f"rows, config vocab_size {vocab}")

    a = "qwen3"
    kvs = [("general.architecture", T_STR, a),
           ("general.name", T_STR, os.path.basename(os.path.normpath(args.model))),
           ("general.file_type", T_U32, FILE_TYPE[dtypes.pop()]),
           (f"{a}.block_count", T_U32, layers),
           (f"{a}.context_length", T_U32, cfg.get("max_position_embeddings", 40960)),
           (f"{a}.embedding_length", T_U32, cfg["hidden_size"]),
           (f"{a}.feed_forward_length", T_U32, cfg["intermediate_size"]),
           (f"{a}.attention.head_count", T_U32, heads),
           (f"{a}.attention.head_count_kv", T_U32, cfg.get("num_key_value_heads", heads)),
           (f"{a}.rope.freq_base", T_F32, theta),
           (f"{a}.attention.layer_norm_rms_epsilon", T_F32, float(cfg.get("rms_norm_eps", 1e-6))),
           (f"{a}.attention.key_length", T_U32, head_dim),
           (f"{a}.attention.value_length", T_U32, head_dim)]
    vocab_kvs = [kv for kv in read_gguf_metadata(args.vocab_gguf) if kv[0].startswith("tokenizer.")]
    keys = {k for k, _, _ in vocab_kvs}
    for need in ("tokenizer.ggml.model", "tokenizer.ggml.tokens"):
        if need not in keys:
            fail(f"--vocab-gguf {args.vocab_gguf}: no '{need}'")
    for key, t, v in vocab_kvs:
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            et, items = v
            if len(items) > vocab:
                fail(f"--vocab-gguf {args.vocab_gguf}: {len(items)} tokens, more than the "
                     f"model's vocab_size {vocab}")
            fill = {"tokenizer.ggml.tokens": lambda i: f"[PAD{i}]".encode(),
                    "tokenizer.ggml.token_type": lambda i: TOKEN_TYPE_UNUSED,
                    "tokenizer.ggml.scores": lambda i: -1000.0}[key]
            v = (et, items + [fill(i) for i in range(len(items), vocab)])
        kvs.append((key, t, v))
    write_gguf(args.out, kvs, tensors)
    size = os.path.getsize(args.out)
    print(json.dumps({"gguf": args.out, "tensors": len(tensors), "bytes": size,
                      "vocab": vocab, "tokenizer_tokens": len(dict(
                          (k, v) for k, _, v in vocab_kvs)["tokenizer.ggml.tokens"][1])}))


def random_bf16(rng, n):
    """n random bf16 values of magnitude 2^-7 .. 2^-5, random sign (fast: bytes, not floats)."""
    low = rng.randbytes(n)
    high = rng.randbytes(n).translate(bytes((b & 0x80) | 0x3C for b in range(256)))
    out = bytearray(2 * n)
    out[0::2], out[1::2] = low, high
    return bytes(out)


def tiny_hf(args):
    h, inter, heads, kv, hd = args.hidden, args.hidden * 3, args.heads, args.kv_heads, args.head_dim
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": h,
           "intermediate_size": inter, "num_hidden_layers": args.layers,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "vocab_size": args.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": args.tied,
           "attention_bias": False, "torch_dtype": "bfloat16", "bos_token_id": None,
           "eos_token_id": 151645}
    rng = random.Random(args.seed)
    one = struct.pack("<H", 0x3F80)  # bf16 1.0
    shapes = [("model.embed_tokens.weight", [args.vocab, h])]
    for i in range(args.layers):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [h]),
                   (p + "post_attention_layernorm.weight", [h]),
                   (p + "self_attn.q_proj.weight", [heads * hd, h]),
                   (p + "self_attn.k_proj.weight", [kv * hd, h]),
                   (p + "self_attn.v_proj.weight", [kv * hd, h]),
                   (p + "self_attn.o_proj.weight", [h, heads * hd]),
                   (p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd]),
                   (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
                   (p + "mlp.down_proj.weight", [h, inter])]
    shapes.append(("model.norm.weight", [h]))
    if not args.tied:
        shapes.append(("lm_head.weight", [args.vocab, h]))
    header, blobs, off = {}, [], 0
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        blob = one * n if len(shape) == 1 else random_bf16(rng, n)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(json.dumps({"tiny_hf": args.out, "bytes": off}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="HF Qwen3 folder -> GGUF")
    c.add_argument("model")
    c.add_argument("out")
    c.add_argument("--vocab-gguf", required=True, help="llama.cpp vocab GGUF (tokenizer.* keys)")
    t = sub.add_parser("tiny-hf", help="a random bf16 Qwen3 HF folder")
    t.add_argument("out")
    t.add_argument("--layers", type=int, default=2)
    t.add_argument("--hidden", type=int, default=256)
    t.add_argument("--heads", type=int, default=4)
    t.add_argument("--kv-heads", type=int, default=2)
    t.add_argument("--head-dim", type=int, default=64)
    t.add_argument("--vocab", type=int, default=151936)
    t.add_argument("--tied", action="store_true")
    t.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    convert(a) if a.cmd == "convert" else tiny_hf(a)


if __name__ == "__main__":
    main()
