#!/usr/bin/env python3
"""`edgespec quantize` read back by an independent reader (numpy only), written from the public
format definitions rather than from edgespec's code:

  safetensors   8-byte little-endian header length, JSON header {name: {dtype, shape,
                data_offsets}}, data section; sharded folders list their files in
                model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}.
  AWQ (GEMM)    per linear W [N, K]: qweight int32 [K, N/8], whose int32 j of row k holds, in bits
                4i .. 4i+3, the 4-bit q of output feature 8j + ORDER[i] with ORDER = [0, 2, 4, 6,
                1, 3, 5, 7] (AutoAWQ's pack order); qzeros int32 [K/G, N/8] packed the same way;
                scales f16 [K/G, N]; W^T[k, n] = (q - z) * s of k's group.
  FP8 (Qwen3)   weight F8_E4M3 [N, K] (OCP E4M3: sign, 4-bit exponent of bias 7, 3-bit mantissa,
                subnormals at exponent 0, S.1111.111 NaN), weight_scale_inv f32
                [ceil(N/128), ceil(K/128)]; W[n, k] = fp8(q) * scale_inv[n // 128, k // 128].

For tiny fixture models (tests/data/models) quantized to int4 (groups 64 and 32, one sharded) and
fp8, it checks: the config (the input's, plus the quantization_config the readers expect), the
tensor set (every decoder linear replaced, everything else byte-identical to the input), the
dequantized weights within the rounding error of each format of the originals (int4: half a
step, s / 2; fp8: half an E4M3 ulp), the copied files, and each refusal of bad input (one line on
stderr naming the problem, exit code 1). Exits 77 (skipped) when numpy is missing.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("test_quantize_folder: numpy is not installed (tools/install_deps.sh); skipped")
    sys.exit(77)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(REPO, "tests", "data", "models")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
NP_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "I32": np.int32,
             "F8_E4M3": np.uint8}
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of one file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    check((8 + n) % 8 == 0, f"{path}: tensor data not 8-byte aligned")
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], list(t["shape"]), data[b:e])
        end = max(end, e)
    check(end == len(data), f"{path}: data section has {len(data)} bytes, tensors end at {end}")
    return out


def read_folder(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        idx = json.load(f)
    tensors, total = {}, 0
    for shard in sorted(set(idx["weight_map"].values())):
        for name, t in read_safetensors(os.path.join(folder, shard)).items():
            check(idx["weight_map"].get(name) == shard, f"{name} is in {shard}, index disagrees")
            check(name not in tensors, f"{name} in two shards")
            tensors[name] = t
            total += len(t[2])
    check(set(tensors) == set(idx["weight_map"]), "index weight_map != tensors of the shards")
    check(idx["metadata"]["total_size"] == total, "index total_size != the tensors' bytes")
    return tensors


def array(t):
    dtype, shape, raw = t
    a = np.frombuffer(raw, dtype=NP_DTYPES[dtype]).reshape(shape)
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a


def unpack_awq(packed):
    """int32 [R, C/8] -> uint8 [R, C]: nibble i of word j is column 8j + AWQ_ORDER[i]."""
    words = packed.view(np.uint32)
    out = np.zeros((words.shape[0], words.shape[1] * 8), dtype=np.uint8)
    for i, col in enumerate(AWQ_ORDER):
        out[:, col::8] = (words >> (4 * i)) & 0xF
    return out


def fp8_e4m3(codes):
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = (c & 7).astype(np.float64)
    value = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * np.exp2(e - 7.0))
    value = np.where((e == 15) & (m == 7), np.nan, value)
    return sign * value


def linear_names(config, prefix):
    return [f"{prefix}{i}.{m}.weight" for i in range(config["num_hidden_layers"]) for m in LINEARS]


def run(edgespec, *args):
    return subprocess.run([edgespec, "quantize", *args], capture_output=True, text=True,
                          timeout=120)


def check_model(edgespec, model, to, group, tmp, shard_mb=None):
    src = os.path.join(MODELS, model)
    out = os.path.join(tmp, f"{model.replace('/', '_')}-{to}-{group}")
    args = ["--to", to, "-q", src, out]
    if to == "int4":
        args[2:2] = ["--group", str(group)]
    if shard_mb is not None:
        args[2:2] = ["--max-shard-mb", str(shard_mb)]
    r = run(edgespec, *args)
    what = f"{model} --to {to}" + (f" --group {group}" if to == "int4" else "")
    check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr.strip()}")
    if r.returncode != 0:
        return
    check("quantized" in r.stdout, f"{what}: no summary line: {r.stdout!r}")
    if shard_mb is not None:
        check(os.path.exists(os.path.join(out, "model.safetensors.index.json")),
              f"{what}: --max-shard-mb {shard_mb} wrote no shards")

    with open(os.path.join(src, "config.json")) as f:
        config_in = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        config_out = json.load(f)
    q = config_out.pop("quantization_config", None)
    check(config_out == config_in, f"{what}: config.json changed beyond quantization_config")
    if to == "int4":
        expected = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                    "version": "gemm", "modules_to_not_convert": None}
    else:
        expected = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128]}
    check(q == expected, f"{what}: quantization_config {q} != {expected}")

    for name in os.listdir(src):
        if name in ("config.json", "model.safetensors"):
            continue
        with open(os.path.join(src, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
            check(a.read() == b.read(), f"{what}: {name} not copied as it is")

    tin = read_safetensors(os.path.join(src, "model.safetensors"))
    tout = read_folder(out)
    prefix = "layers." if config_in["architectures"] == ["DFlashDraftModel"] else "model.layers."
    linears = linear_names(config_in, prefix)
    expected_names = set()
    worst = 0.0
    for name, t in tin.items():
        if name not in linears:
            expected_names.add(name)
            check(tout.get(name) == t, f"{what}: {name} not copied byte for byte")
            continue
        w = array(t)  # [N, K]
        n, k = w.shape
        module = name[: -len(".weight")]
        if to == "int4":
            names = [module + s for s in (".qweight", ".qzeros", ".scales")]
            expected_names.update(names)
            qw, qz, sc = (tout.get(x) for x in names)
            if None in (qw, qz, sc):
                check(False, f"{what}: {module}: missing one of {names}")
                continue
            check((qw[0], qw[1]) == ("I32", [k, n // 8]), f"{what}: {names[0]} {qw[:2]}")
            check((qz[0], qz[1]) == ("I32", [k // group, n // 8]), f"{what}: {names[1]} {qz[:2]}")
            check((sc[0], sc[1]) == ("F16", [k // group, n]), f"{what}: {names[2]} {sc[:2]}")
            iw = unpack_awq(array(qw))                    # [K, N]
            iz = unpack_awq(array(qz))                    # [K/G, N]
            s = array(sc).astype(np.float64)              # [K/G, N]
            check(bool(np.all(s > 0)), f"{what}: {module}: a scale <= 0")
            s_full = np.repeat(s, group, axis=0)          # [K, N]
            deq = (iw.astype(np.float64) - np.repeat(iz, group, axis=0)) * s_full
            err = np.abs(deq.T - w)
            # Half a step, plus the f32 rounding of w / s in the quantizer (2^-20 of a step).
            bound = s_full.T * (0.5 + 2.0 ** -20)
        else:
            names = [name, module + ".weight_scale_inv"]
            expected_names.update(names)
            qw, si = tout.get(names[0]), tout.get(names[1])
            if None in (qw, si):
                check(False, f"{what}: {module}: missing one of {names}")
                continue
            nb, kb = -(-n // 128), -(-k // 128)
            check((qw[0], qw[1]) == ("F8_E4M3", [n, k]), f"{what}: {name} {qw[:2]}")
            check((si[0], si[1]) == ("F32", [nb, kb]), f"{what}: {names[1]} {si[:2]}")
            codes = array(qw)
            check(not bool(np.any((codes & 0x7F) == 0x7F)), f"{what}: {name}: NaN codes")
            s = array(si).astype(np.float64)
            s_full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:n, :k]
            deq = fp8_e4m3(codes) * s_full
            err = np.abs(deq - w)
            # Each block's largest |w| must come out as +-448 (scale = amax / 448).
            for bi in range(nb):
                for bj in range(kb):
                    block = codes[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128]
                    check(int(np.max(block & 0x7F)) == 0x7E or s[bi, bj] == 1.0,
                          f"{what}: {name} block ({bi}, {bj}) does not reach 448")
            # Half an ulp: 2^-4 of the value for normals, 2^-10 of the scale for subnormals.
            bound = np.maximum(np.abs(w) * 2.0 ** -4, s_full * 2.0 ** -10) * (1 + 2.0 ** -20)
        bad = err > bound
        check(not bool(np.any(bad)), f"{what}: {name}: {int(np.sum(bad))} values beyond the "
              f"quantization error, worst {float(np.max(err - bound)):.3g} over")
        worst = max(worst, float(np.max(err / np.maximum(bound, 1e-30))))
    check(set(tout) == expected_names,
          f"{what}: unexpected tensors {sorted(set(tout) ^ expected_names)[:6]}")
    print(f"{what}: {len(tout)} tensors, worst error {worst:.3f} of the bound")
    return out


def check_refusals(edgespec, tmp):
    qwen3 = os.path.join(MODELS, "qwen3")
    busy = os.path.join(tmp, "busy")
    os.makedirs(busy)
    with open(os.path.join(busy, "notes.txt"), "w") as f:
        f.write("x")
    gguf = os.path.join(tmp, "model.gguf")
    with open(gguf, "wb") as f:
        f.write(b"GGUF" + bytes(28))
    quantized = os.path.join(tmp, "quantized")
    run(edgespec, "--to", "fp8", "-q", qwen3, quantized)
    nan_model = os.path.join(tmp, "nan_model")
    shutil.copytree(qwen3, nan_model)
    path = os.path.join(nan_model, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    begin = 8 + n + header["model.layers.0.self_attn.o_proj.weight"]["data_offsets"][0]
    blob[begin + 2 * 5:begin + 2 * 6] = struct.pack("<H", 0x7FC0)  # bf16 NaN at [0, 5]
    with open(path, "wb") as f:
        f.write(blob)
    fresh = os.path.join(tmp, "fresh")
    cases = [
        (["--to", "int4", qwen3, fresh],
         "'model.layers.0.mlp.down_proj.weight' [128, 192] cannot be int4 with --group 128: k "
         "must be a multiple of the int4 group (--group 64 fits)"),
        (["--to", "int4", "--group", "48", qwen3, fresh], "'--group' = 48: int4 group must be 32, 64 or 128"),
        (["--to", "fp8", "--group", "64", qwen3, fresh], "applies to --to int4 only"),
        (["--to", "int8", qwen3, fresh], "'--to' = int8 must be int4 or fp8"),
        (["--to", "fp8", qwen3, busy], "exists and is not empty (pass --force"),
        (["--to", "fp8", gguf, fresh], "is a GGUF file; convert it first"),
        (["--to", "fp8", tmp, fresh], "is not a model folder (it has no config.json)"),
        (["--to", "fp8", os.path.join(tmp, "absent"), fresh], "does not exist"),
        (["--to", "fp8", quantized, fresh], "the model is quantized already"),
        (["--to", "fp8", "--force", qwen3, qwen3], "is IN_FOLDER"),
        (["--to", "fp8", nan_model, fresh],
         "'model.layers.0.self_attn.o_proj.weight in " + nan_model +
         "' has a non-finite value (nan) at [0, 5]"),
    ]
    for args, fragment in cases:
        r = run(edgespec, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and fragment in r.stderr,
              f"quantize {' '.join(args)}: exit {r.returncode}, stderr {r.stderr!r}, "
              f"expected one line with {fragment!r}")
    check(not os.path.exists(fresh) or not os.listdir(fresh), "a refused run left files behind")
    # --force writes into the non-empty folder (and keeps what is not a weight file).
    r = run(edgespec, "--to", "fp8", "-q", "--force", qwen3, busy)
    check(r.returncode == 0 and os.path.exists(os.path.join(busy, "model.safetensors")),
          f"--force: exit {r.returncode}: {r.stderr.strip()}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--edgespec", required=True)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="es_quantize_")
    try:
        check_model(a.edgespec, "qwen3", "int4", 64, tmp, shard_mb=0.1)
        check_model(a.edgespec, "qwen3", "int4", 32, tmp)
        check_model(a.edgespec, "qwen3", "fp8", 128, tmp)
        check_model(a.edgespec, "qwen2", "fp8", 128, tmp, shard_mb=0.2)
        check_model(a.edgespec, "llama", "int4", 64, tmp)
        check_model(a.edgespec, "dflash_tiny/draft", "int4", 32, tmp)
        check_refusals(a.edgespec, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
