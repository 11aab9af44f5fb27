#!/usr/bin/env python3
"""The bad-input suite: runs every row of cases.tsv against the edgespec binary.

A row makes a bad input with a named setup recipe (below), runs one edgespec command on it in its
own temporary folder, and checks that the command ends the way the row says: exit code 0 ("ok"),
an ordinary error exit ("error": 1 to 125, never a signal, never a timeout), or one exact code;
and that stderr contains every fragment of the row (fragments separated by "&&"). A run that
outlives the row's timeout fails the row (a hang). Each process runs with a data-segment limit, so
a size bomb that makes edgespec allocate without bound fails its row instead of the machine.

Table format (tab-separated; '#' starts a comment line):
  id  setup  expect  fragment  timeout_s  command
  setup    "recipe arg..." (a recipe of RECIPES, its arguments split like a shell command line)
  command  edgespec's arguments, split like a shell command line; {model}, {draft}, {gguf},
           {req} and {tmp} are replaced by the paths the setup made
The id's prefix before the first '.' is the row's category (counted in the summary).

  python3 tests/bad_input/run_bad_input.py --edgespec build/edgespec [--filter REGEX] [--list]
  python3 tests/bad_input/run_bad_input.py --recipes      (what each setup recipe makes)
"""
import argparse
import concurrent.futures
import json
import os
import re
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "data", "models")
MEMORY_LIMIT_MB = 2048  # per edgespec process (RLIMIT_DATA), --memory-limit-mb
OUTPUT_LIMIT_BYTES = 1 << 20  # stdout/stderr kept per run; the rest is read and dropped

BF16_NAN = b"\xc0\x7f"  # 0x7FC0 little-endian
BF16_INF = b"\x80\x7f"  # 0x7F80


# ---------------------------------------------------------------------------------------------
# Fixture builders: everything is written at run time from tests/data/models.

def gpt2_byte_chars():
    """GPT-2's byte-level alphabet: byte b -> the unicode character tokenizer.json uses for it."""
    shown = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
             + list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for b in range(256):
        if b in shown:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json(vocab_size):
    """A byte-level BPE tokenizer.json with exactly vocab_size ids: the 256 bytes, merges of
    lowercase letter pairs, then <|endoftext|> and <|im_end|> as special tokens."""
    chars = gpt2_byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    merges = []
    letters = "abcdefghijklmnopqrstuvwxyz"
    pairs = [(a, b) for a in letters for b in letters]
    for left, right in pairs[:vocab_size - 258]:
        vocab[left + right] = len(vocab)
        merges.append([left, right])
    specials = ["<|endoftext|>", "<|im_end|>"]
    added = [{"id": vocab_size - 2 + i, "content": s, "special": True}
             for i, s in enumerate(specials)]
    return {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    }


def copy_model(src_family, dest):
    """A copy of a tiny fixture model folder with a tokenizer.json that fits its vocabulary."""
    src = os.path.join(MODELS, src_family)
    os.makedirs(dest)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dest, name))
    with open(os.path.join(src, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    write_json(os.path.join(dest, "tokenizer.json"), tokenizer_json(vocab))
    return dest


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def write_text(path, text):
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_safetensors(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def replace_with_special(path, kind):
    """Replaces `path` with a FIFO, a directory, a sparse file of a size, or a link."""
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
    elif kind.startswith("sparse:"):  # as `truncate -s SIZE`: no disk used
        with open(path, "wb") as f:
            f.truncate(parse_size(kind[len("sparse:"):]))
    elif kind.startswith("link:"):
        os.symlink(kind[len("link:"):], path)
    elif kind == "empty":
        open(path, "wb").close()
    else:
        raise ValueError("unknown special file kind " + kind)


def unescape(text):
    """The bytes a table cell spells with Python escapes (\\x00, \\n, \\xff: one byte each)."""
    return text.encode("utf-8").decode("unicode_escape").encode("latin-1")


def set_fields(obj, fields):
    """Sets dotted keys of `fields` in obj; a value of null removes the key."""
    for key, value in fields.items():
        parts = key.split(".")
        node = obj
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value


# GGUF: a small writer for header-level cases (version 3, little-endian).
GGUF_STRING, GGUF_U32, GGUF_ARRAY = 8, 4, 9


def gguf_string(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs=None, tensors=None, magic=b"GGUF", version=3, tensor_count=None,
              kv_count=None, data=b""):
    """kvs: [(key, type, raw value bytes)]; tensors: [(name bytes, dims, ggml type, offset)]."""
    kvs = kvs if kvs is not None else [
        (b"general.architecture", GGUF_STRING, gguf_string("qwen3"))]
    tensors = tensors if tensors is not None else [(b"token_embd.weight", [64, 4], 0, 0)]
    out = magic + struct.pack("<I", version)
    out += struct.pack("<QQ", len(tensors) if tensor_count is None else tensor_count,
                       len(kvs) if kv_count is None else kv_count)
    for key, vtype, raw in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + raw
    for name, dims, gtype, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gtype, offset)
    out += b"\0" * (-len(out) % 32)
    return out + data


GGUF_U32_TYPE, GGUF_I32_TYPE, GGUF_F32_TYPE, GGUF_BOOL_TYPE = 4, 5, 6, 7
GGML_BF16 = 30
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down"}


def gguf_name(hf):
    """llama.cpp's GGUF name of an HF tensor name."""
    top = {"model.embed_tokens.weight": "token_embd.weight",
           "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    layer, rest = hf[len("model.layers."):].split(".", 1)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[module]}.{kind}"


def gguf_from_qwen3(rename=None, nan=None):
    """The tiny qwen3 fixture as a valid GGUF (bf16 tensors, a byte-level BPE vocabulary that
    `generate` can use); rename maps a GGUF tensor name to the name (bytes) written instead; the
    tensor named `nan` is all NaN."""
    folder = os.path.join(MODELS, "qwen3")
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    header, body = read_safetensors(os.path.join(folder, "model.safetensors"))
    tok = tokenizer_json(c["vocab_size"])
    tokens = [None] * c["vocab_size"]
    for text, i in tok["model"]["vocab"].items():
        tokens[i] = text
    types = [1] * c["vocab_size"]
    for t in tok["added_tokens"]:
        tokens[t["id"]], types[t["id"]] = t["content"], 3
    a = "qwen3"
    u32 = lambda k, v: (k.encode(), GGUF_U32_TYPE, struct.pack("<I", v))
    f32 = lambda k, v: (k.encode(), GGUF_F32_TYPE, struct.pack("<f", v))
    strings = lambda vs: struct.pack("<IQ", GGUF_STRING, len(vs)) + b"".join(
        gguf_string(v) for v in vs)
    kvs = [(b"general.architecture", GGUF_STRING, gguf_string(a)),
           u32(a + ".block_count", c["num_hidden_layers"]),
           u32(a + ".context_length", c["max_position_embeddings"]),
           u32(a + ".embedding_length", c["hidden_size"]),
           u32(a + ".feed_forward_length", c["intermediate_size"]),
           u32(a + ".attention.head_count", c["num_attention_heads"]),
           u32(a + ".attention.head_count_kv", c["num_key_value_heads"]),
           u32(a + ".attention.key_length", c["head_dim"]),
           u32(a + ".attention.value_length", c["head_dim"]),
           f32(a + ".attention.layer_norm_rms_epsilon", c["rms_norm_eps"]),
           f32(a + ".rope.freq_base", c["rope_parameters"]["rope_theta"]),
           (b"tokenizer.ggml.model", GGUF_STRING, gguf_string("gpt2")),
           (b"tokenizer.ggml.pre", GGUF_STRING, gguf_string("gpt2")),
           (b"tokenizer.ggml.tokens", GGUF_ARRAY, strings(tokens)),
           (b"tokenizer.ggml.token_type", GGUF_ARRAY,
            struct.pack("<IQ", GGUF_I32_TYPE, len(types)) + struct.pack(f"<{len(types)}i", *types)),
           (b"tokenizer.ggml.merges", GGUF_ARRAY,
            strings([l + " " + r for l, r in tok["model"]["merges"]])),
           u32("tokenizer.ggml.eos_token_id", c["vocab_size"] - 2)]
    tensors, data = [], b""
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        g = gguf_name(name)
        values = body[begin:end] if g != nan else BF16_NAN * ((end - begin) // 2)
        tensors.append(((rename or {}).get(g, g.encode()), list(reversed(info["shape"])),
                        GGML_BF16, len(data)))
        data += values + b"\0" * (-(end - begin) % 32)
    return gguf_file(kvs=kvs, tensors=tensors, data=data)


# ---------------------------------------------------------------------------------------------
# Setup recipes: recipe(row_dir, *args) -> placeholders for the command. Every recipe that needs
# a model starts from a fresh copy of a tiny fixture in row_dir, so rows never share files.

def base(row_dir, family="qwen3"):
    return {"tmp": row_dir, "model": copy_model(family, os.path.join(row_dir, "model"))}


def r_none(row_dir):
    """Nothing: the bad input is in the command (still a tiny model at {model})."""
    return base(row_dir)


def r_rm(row_dir, name):
    """The tiny model without file `name`."""
    p = base(row_dir)
    os.remove(os.path.join(p["model"], name))
    return p


def r_special(row_dir, name, kind):
    """The tiny model with file `name` replaced by a special file (fifo, dir, sparse:SIZE,
    link:TARGET, empty)."""
    p = base(row_dir)
    replace_with_special(os.path.join(p["model"], name), kind)
    return p


def r_text(row_dir, name, text):
    """The tiny model with file `name` replaced by `text` (Python escapes such as \\x00 and
    \\n are decoded)."""
    p = base(row_dir)
    raw = unescape(text)
    with open(os.path.join(p["model"], name), "wb") as f:
        f.write(raw)
    return p


def edited_json(row_dir, name, fields):
    """The tiny model with fields of its JSON file `name` set (a JSON object of dotted keys;
    null removes)."""
    p = base(row_dir)
    path = os.path.join(p["model"], name)
    with open(path) as f:
        doc = json.load(f)
    set_fields(doc, json.loads(fields))
    write_json(path, doc)
    return p


def r_config(row_dir, fields):
    """The tiny model with config.json fields set."""
    return edited_json(row_dir, "config.json", fields)


def r_tokenizer(row_dir, fields):
    """The tiny model with tokenizer.json fields set."""
    return edited_json(row_dir, "tokenizer.json", fields)


def r_tokenizer_config(row_dir, text):
    """The tiny model with a tokenizer_config.json of the given JSON text."""
    return r_text(row_dir, "tokenizer_config.json", text)


def r_st_header(row_dir, fields):
    """model.safetensors with header entries changed: {"tensor": {"dtype"|"shape"|...: v}}
    (a tensor value of null removes the tensor from the header)."""
    p = base(row_dir)
    path = os.path.join(p["model"], "model.safetensors")
    header, body = read_safetensors(path)
    for name, change in json.loads(fields).items():
        if change is None:
            header.pop(name)
        elif name in header and isinstance(change, dict):
            header[name].update(change)
        else:
            header[name] = change
    write_safetensors(path, header, body)
    return p


def r_st_truncate(row_dir, size):
    """model.safetensors cut to `size` bytes (negative: that many bytes off the end)."""
    p = base(row_dir)
    path = os.path.join(p["model"], "model.safetensors")
    n = int(size)
    with open(path, "r+b") as f:
        f.truncate(n if n >= 0 else os.path.getsize(path) + n)
    return p


def r_st_raw(row_dir, header_len, header_text):
    """model.safetensors as an 8-byte header length and the given header bytes (escapes
    decoded), followed by 64 zero bytes."""
    p = base(row_dir)
    raw = unescape(header_text)
    with open(os.path.join(p["model"], "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", int(header_len)) + raw + b"\0" * 64)
    return p


def r_st_garbage(row_dir, size):
    """model.safetensors as `size` deterministic pseudo-random bytes."""
    p = base(row_dir)
    state, out = 12345, bytearray()
    for _ in range(int(size)):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(state >> 16 & 0xFF)
    with open(os.path.join(p["model"], "model.safetensors"), "wb") as f:
        f.write(bytes(out))
    return p


def r_nonfinite(row_dir, tensor, value, which="all"):
    """model.safetensors with tensor `tensor` (bf16) set to nan or inf: every element, or only
    element 0 (which=first); {req}: a request file of two prompts."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    write_json(p["req"], ["hello", "hi there"])
    path = os.path.join(p["model"], "model.safetensors")
    header, body = read_safetensors(path)
    begin, end = header[tensor]["data_offsets"]
    fill = {"nan": BF16_NAN, "inf": BF16_INF}[value]
    count = (end - begin) // 2 if which == "all" else 1
    body = body[:begin] + fill * count + body[begin + 2 * count:]
    write_safetensors(path, header, body)
    return p


def r_index(row_dir, mode):
    """The tiny model's weights as one shard behind model.safetensors.index.json, broken per
    `mode`: missing-shard, escape, absolute, empty-map, not-object, wrong-tensor, invalid-json,
    fifo, sparse:8G, dir (the index itself), shard-fifo, shard-dir, shard-truncated (the
    shard)."""
    p = base(row_dir)
    m = p["model"]
    shard = "model-00001-of-00001.safetensors"
    os.rename(os.path.join(m, "model.safetensors"), os.path.join(m, shard))
    header, _ = read_safetensors(os.path.join(m, shard))
    names = [n for n in header if n != "__metadata__"]
    weight_map = {n: shard for n in names}
    index_path = os.path.join(m, "model.safetensors.index.json")
    index = {"metadata": {}, "weight_map": weight_map}
    if mode == "missing-shard":
        weight_map[names[0]] = "model-00002-of-00002.safetensors"
    elif mode == "escape":
        weight_map[names[0]] = "../../../../etc/passwd"
    elif mode == "absolute":
        weight_map[names[0]] = "/etc/passwd"
    elif mode == "empty-map":
        index["weight_map"] = {}
    elif mode == "not-object":
        index["weight_map"] = [shard]
    elif mode == "wrong-tensor":
        weight_map["model.layers.9.mlp.up_proj.weight"] = shard
    elif mode in ("fifo", "sparse:8G", "dir"):
        replace_with_special(index_path, mode)
        return p
    elif mode.startswith("shard-"):
        shard_path = os.path.join(m, shard)
        if mode == "shard-truncated":
            with open(shard_path, "r+b") as f:
                f.truncate(100)
        else:
            replace_with_special(shard_path, mode[len("shard-"):])
    elif mode == "invalid-json":
        write_text(index_path, '{"weight_map": {')
        return p
    else:
        raise ValueError("unknown index mode " + mode)
    write_json(index_path, index)
    return p


def r_gguf(row_dir, variant):
    """{gguf}: a GGUF file per `variant`: a small hand-made header broken one way (empty,
    bad-magic, version-1, truncated-*, huge-*, unknown-type, offset-out-of-range, name-*, ...),
    the tiny qwen3 model as a GGUF (model) or that model broken (model-truncated, model-name-*,
    model-nan), or a special file (fifo, dir, sparse:SIZE, link:TARGET)."""
    p = base(row_dir)
    path = os.path.join(row_dir, "bad.gguf")
    good = gguf_file(data=b"\0" * 1024)
    # A tensor named n with n_dims = 0: the error that names it comes before any other check.
    name_with = lambda n: gguf_file(tensors=[(n, [], 0, 0)])
    variants = {
        "empty": b"",
        "magic-only": b"GGUF",
        "bad-magic": b"GGUX" + good[4:],
        "version-1": gguf_file(version=1),
        "version-big-endian": gguf_file(version=0x03000000),
        "truncated-header": good[:20],
        "truncated-kv": good[:40],
        "truncated-tensor-info": good[:90],
        "truncated-data": gguf_file(data=b"\0" * 16),
        "huge-tensor-count": gguf_file(tensor_count=1 << 62),
        "huge-kv-count": gguf_file(kv_count=0xFFFFFFFFFFFFFFFF),
        "huge-key-length": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 60)
                          + b"k" * 64,
        "huge-string-value": gguf_file(kvs=[(b"general.architecture", GGUF_STRING,
                                             struct.pack("<Q", 1 << 62) + b"qwen3")]),
        "huge-array": gguf_file(kvs=[(b"tokenizer.ggml.tokens", GGUF_ARRAY,
                                      struct.pack("<IQ", GGUF_STRING, 1 << 61))]),
        "huge-dims": gguf_file(tensors=[(b"token_embd.weight", [1 << 40, 1 << 40], 0, 0)]),
        "unknown-type": gguf_file(tensors=[(b"token_embd.weight", [64, 4], 9999, 0)],
                                  data=b"\0" * 1024),
        "offset-out-of-range": gguf_file(tensors=[(b"token_embd.weight", [64, 4], 0, 1 << 40)],
                                         data=b"\0" * 1024),
        "name-control": name_with(b"blk.0.\x1b[31mred\x07\x01tail"),
        "name-nul": name_with(b"blk.0.attn\x00hidden_tail"),
        "name-huge": name_with(b"x" * 100000),
        "name-invalid-utf8": name_with(b"blk.\xff\xfe.weight_tail"),
        "no-tensors": gguf_file(tensors=[]),
    }
    model_variants = {  # the tiny qwen3 model as a GGUF, one thing broken
        "model": lambda: gguf_from_qwen3(),
        "model-truncated": lambda: gguf_from_qwen3()[:-1000],
        "model-name-control": lambda: gguf_from_qwen3(
            rename={"blk.0.attn_q.weight": b"blk.0.attn_q\x1b[2J\x07.weight_tail"}),
        "model-name-nul": lambda: gguf_from_qwen3(
            rename={"blk.0.attn_q.weight": b"blk.0.attn_q\x00.weight_tail"}),
        "model-nan": lambda: gguf_from_qwen3(nan="output_norm.weight"),
    }
    if variant in model_variants:
        variants[variant] = model_variants[variant]()
    if variant in ("fifo", "dir") or variant.startswith(("sparse:", "link:")):
        replace_with_special(path, variant)
    else:
        with open(path, "wb") as f:
            f.write(variants[variant])
    p["gguf"] = path
    return p


def r_draft(row_dir, fields="{}", target="dflash_tiny/target"):
    """{model}: a target with a tokenizer (the draft's own tiny target, or the fixture family
    `target`); {draft}: a copy of the tiny DFlash draft with config fields set (dotted keys;
    null removes)."""
    p = base(row_dir, target)
    draft = os.path.join(row_dir, "draft")
    shutil.copytree(os.path.join(MODELS, "dflash_tiny", "draft"), draft)
    path = os.path.join(draft, "config.json")
    with open(path) as f:
        config = json.load(f)
    set_fields(config, json.loads(fields))
    write_json(path, config)
    p["draft"] = draft
    return p


def r_draft_special(row_dir, name, kind):
    """The tiny target and draft, the draft's file `name` replaced by a special file."""
    p = r_draft(row_dir)
    replace_with_special(os.path.join(p["draft"], name), kind)
    return p


def r_req(row_dir, text):
    """{req}: a request file holding `text` (escapes decoded)."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    raw = unescape(text)
    with open(p["req"], "wb") as f:
        f.write(raw)
    return p


def r_req_special(row_dir, kind):
    """{req}: a request file that is a special file (fifo, dir, sparse:SIZE, link:TARGET,
    empty)."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    replace_with_special(p["req"], kind)
    return p


def r_req_many(row_dir, count):
    """{req}: a JSON array of `count` short prompts."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    write_json(p["req"], ["hello"] * int(count))
    return p


def r_req_long(row_dir, words):
    """{req}: one request whose prompt is `words` words long."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    write_json(p["req"], ["hello world " * (int(words) // 2)])
    return p


def r_req_deep(row_dir, depth):
    """{req}: `depth` nested JSON arrays (a parser recursion bomb)."""
    p = base(row_dir)
    p["req"] = os.path.join(row_dir, "req.json")
    write_text(p["req"], "[" * int(depth) + "]" * int(depth))
    return p


RECIPES = {
    "none": r_none,
    "rm": r_rm,
    "special": r_special,
    "text": r_text,
    "config": r_config,
    "tokenizer": r_tokenizer,
    "tokenizer_config": r_tokenizer_config,
    "st_header": r_st_header,
    "st_truncate": r_st_truncate,
    "st_raw": r_st_raw,
    "st_garbage": r_st_garbage,
    "nonfinite": r_nonfinite,
    "index": r_index,
    "gguf": r_gguf,
    "draft": r_draft,
    "draft_special": r_draft_special,
    "req": r_req,
    "req_special": r_req_special,
    "req_many": r_req_many,
    "req_long": r_req_long,
    "req_deep": r_req_deep,
}


# ---------------------------------------------------------------------------------------------
# The table and the runs.

class Row:
    def __init__(self, line_no, fields):
        if len(fields) != 6:
            raise ValueError(f"cases line {line_no}: {len(fields)} tab-separated fields, want 6")
        self.id, self.setup, self.expect, self.fragment, timeout, self.command = fields
        self.category = self.id.split(".")[0]
        self.timeout = float(timeout)
        recipe = shlex.split(self.setup)[0]
        if recipe not in RECIPES:
            raise ValueError(f"cases line {line_no}: unknown setup recipe '{recipe}'")
        if self.expect not in ("ok", "error") and not re.fullmatch(r"\d+", self.expect):
            raise ValueError(f"cases line {line_no}: expect must be ok, error or a number")


def read_cases(path):
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            row = Row(line_no, line.split("\t"))
            if row.id in seen:
                raise ValueError(f"cases line {line_no}: duplicate id '{row.id}'")
            seen.add(row.id)
            rows.append(row)
    return rows


def child_limits(memory_bytes):
    """What runs in the child before exec: its own process group (a timeout kills all of it) and
    a bounded data segment (a size bomb fails with an allocation error instead of exhausting the
    host; the control rows show that the legitimate runs fit)."""
    def apply():
        os.setsid()
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


class Result:
    def __init__(self, row, argv, rc, stderr, seconds, problem):
        self.row, self.argv, self.rc, self.stderr = row, argv, rc, stderr
        self.seconds, self.problem = seconds, problem

    def first_stderr_line(self):
        lines = [l for l in self.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if "error" in l.lower()]
        return (errors or lines or [""])[0][:200]


def printable(text):
    """`text` with control characters escaped, so that a hostile name in a message cannot drive
    the terminal the report is read on."""
    return "".join(c if c >= " " or c == "\t" else f"\\x{ord(c):02x}" for c in text)


def check(row, rc, stderr, timed_out):
    """Why the run does not meet the row, or None."""
    if timed_out:
        return f"timed out after {row.timeout:g} s (a hang)"
    if rc < 0:
        return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
    if row.expect == "ok" and rc != 0:
        return f"exit code {rc}, expected 0"
    if row.expect == "error" and not 1 <= rc <= 125:
        return f"exit code {rc}, expected an error exit (1 to 125)"
    if re.fullmatch(r"\d+", row.expect) and rc != int(row.expect):
        return f"exit code {rc}, expected {row.expect}"
    for fragment in [f.strip() for f in row.fragment.split("&&") if f.strip() != "-"]:
        if fragment and fragment not in stderr:
            return f"stderr lacks '{fragment}'"
    return None


def run_row(row, edgespec, work_dir, memory_bytes):
    # Named by nothing of the row: the paths in a message must not match a row's fragment.
    row_dir = tempfile.mkdtemp(prefix="row.", dir=work_dir)
    setup = shlex.split(row.setup)
    try:
        places = RECIPES[setup[0]](row_dir, *setup[1:])
    except Exception as e:  # a broken row, not an edgespec failure: reported as such
        return Result(row, [], None, "", 0.0, f"setup '{row.setup}' failed: {e!r}")
    argv = [edgespec]
    for arg in shlex.split(row.command):
        for key, value in places.items():
            arg = arg.replace("{" + key + "}", value)
        argv.append(arg)
    env = dict(os.environ, ES_CACHE_DIR=os.path.join(row_dir, "cache"))
    start = time.monotonic()
    out_path, err_path = os.path.join(row_dir, "stdout"), os.path.join(row_dir, "stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=row_dir, env=env, preexec_fn=child_limits(memory_bytes))
        timed_out = False
        try:
            rc = proc.wait(timeout=row.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    seconds = time.monotonic() - start
    with open(err_path, "rb") as f:
        stderr = f.read(OUTPUT_LIMIT_BYTES).decode("utf-8", "replace")
    problem = check(row, rc, stderr, timed_out)
    return Result(row, argv, rc if not timed_out else None, stderr, seconds, problem)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edgespec", help="path of the edgespec binary")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.tsv"))
    ap.add_argument("--filter", default="", help="only rows whose id matches this regex")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--list", action="store_true",
                    help="print every row's outcome (pass/FAIL, exit code, first stderr line)")
    ap.add_argument("--memory-limit-mb", type=int, default=MEMORY_LIMIT_MB,
                    help="data-segment limit of each edgespec process (default %(default)s)")
    ap.add_argument("--recipes", action="store_true", help="describe the setup recipes and exit")
    args = ap.parse_args()
    if args.recipes:
        for name, recipe in RECIPES.items():
            print(f"{name}: {' '.join(recipe.__doc__.split())}")
        return 0
    if not args.edgespec:
        ap.error("--edgespec is required")
    edgespec = os.path.abspath(args.edgespec)
    rows = [r for r in read_cases(args.cases) if re.search(args.filter, r.id)]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="es_bad_input.") as work_dir:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            memory = args.memory_limit_mb << 20
            results = list(pool.map(lambda r: run_row(r, edgespec, work_dir, memory), rows))
    failures = [r for r in results if r.problem]
    if args.list:
        for r in results:
            print(f"{'FAIL' if r.problem else 'pass'}\t{r.row.id}\trc={r.rc}\t{r.seconds:.1f}s\t"
                  f"{printable(r.first_stderr_line())}")
    for r in failures:
        tail = "".join(f"    {printable(l)}\n" for l in r.stderr.splitlines()[-20:])
        print(f"FAIL {r.row.id}: {r.problem}\n  command: {shlex.join(r.argv)}\n"
              f"  exit code: {r.rc}\n  stderr:\n{tail}")
    categories = {}
    for r in results:
        categories[r.row.category] = categories.get(r.row.category, 0) + 1
    print("rows per category: " + ", ".join(f"{k} {v}" for k, v in sorted(categories.items())))
    print(f"{len(results) - len(failures)} of {len(results)} rows pass "
          f"({time.monotonic() - start:.1f} s)")
    return 1 if failures or not results else 0


if __name__ == "__main__":
    sys.exit(main())
