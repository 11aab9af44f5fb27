#pragma once
// GGUF files for the direct-load tests, made the way llama.cpp's converter lays them out: a
// model's config as {arch}.* metadata, its tensors under GGUF names in chosen ggml types (Llama
// q/k rows permuted for interleaved RoPE), and a small byte-level BPE vocabulary with a ChatML
// template so that `generate` can run on the file. The values come from an HF folder (the
// fixtures in tests/data/models, quantised here where a quantised type is asked for) or from
// random blocks (types this file cannot quantise, e.g. the K-quants).
//
// Names and the permutation are written here from llama.cpp's conventions, independently of the
// library's hfTensorName / unpermuteLlamaRows, so that the tests check those against them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/dtype_convert.h"
#include "model/gguf.h"
#include "model/gguf_test_writer.h"
#include "model/model_config.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "tokenizer/bpe_tokenizer.h"

namespace es::test {

// The forward permutation of llama.cpp's converter, written directly from its numpy expression
// w.reshape(n, 2, d/2, in).swapaxes(1, 2).reshape(w.shape): element [h, i, j] of the swapped
// array (i < d/2, j < 2) is element [h, j, i] of the reshaped one.
inline std::vector<float> permuteLikeLlamaCpp(const std::vector<float>& w, int64_t n, int64_t rows,
                                              int64_t cols) {
  const int64_t d = rows / n;
  std::vector<float> p(w.size());
  for (int64_t h = 0; h < n; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t c = 0; c < cols; ++c)
          p[((h * (d / 2) + i) * 2 + j) * cols + c] = w[((h * 2 + j) * (d / 2) + i) * cols + c];
  return p;
}

// HF tensor name -> llama.cpp's GGUF name (llama.cpp's gguf-py tensor map).
inline std::string ggufNameOf(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const size_t dot = hf.find('.', prefix.size());
  const std::string n = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  const size_t last = rest.rfind('.');
  const auto it = layer.find(rest.substr(0, last));
  if (it == layer.end()) return "";
  return "blk." + n + "." + it->second + rest.substr(last);
}

// ---- quantisers (ggml's reference rounding; only the layout matters to these tests) ----

inline void putHalfBits(std::vector<uint8_t>& b, uint16_t bits) {
  b.push_back(static_cast<uint8_t>(bits & 0xFF));
  b.push_back(static_cast<uint8_t>(bits >> 8));
}

inline std::vector<uint8_t> encodeAs(model::GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> b;
  switch (type) {
    case model::GgmlType::kF32:
      return f32Bytes(x);
    case model::GgmlType::kF16:
      for (float v : x) putHalfBits(b, to_fp16(v).bits);
      return b;
    case model::GgmlType::kBF16:
      for (float v : x) putHalfBits(b, to_bf16(v).bits);
      return b;
    case model::GgmlType::kQ8_0:
      for (size_t k = 0; k < x.size(); k += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[k + j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        putHalfBits(b, to_fp16(d).bits);
        for (int j = 0; j < 32; ++j)
          b.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[k + j] * id))));
      }
      return b;
    case model::GgmlType::kQ4_0:
      // d = (the value of largest magnitude) / -8, so that value is nibble 0; q = x / d + 8.
      for (size_t k = 0; k < x.size(); k += 32) {
        float peak = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::abs(x[k + j]) > std::abs(peak)) peak = x[k + j];
        }
        const float d = peak / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        putHalfBits(b, to_fp16(d).bits);
        auto q = [&](int j) {
          return std::clamp(static_cast<int>(std::lround(x[k + j] * id)) + 8, 0, 15);
        };
        for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
      }
      return b;
    case model::GgmlType::kQ4_1:
      for (size_t k = 0; k < x.size(); k += 32) {
        float lo = x[k], hi = x[k];
        for (int j = 0; j < 32; ++j) lo = std::min(lo, x[k + j]), hi = std::max(hi, x[k + j]);
        const float d = (hi - lo) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
        putHalfBits(b, to_fp16(d).bits);
        putHalfBits(b, to_fp16(lo).bits);
        auto q = [&](int j) {
          return std::clamp(static_cast<int>(std::lround((x[k + j] - lo) * id)), 0, 15);
        };
        for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
      }
      return b;
    default:
      throw std::runtime_error("encodeAs: no quantiser for ggml type " +
                               std::to_string(static_cast<int>(type)));
  }
}

// Random blocks of `type` for `numel` elements, every value finite and below ~1 in magnitude.
inline std::vector<uint8_t> randomBlocks(model::GgmlType type, uint64_t numel, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> b;
  auto bytes = [&](int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(byte(rng)));
  };
  for (uint64_t k = 0; k < numel / 256; ++k) {
    switch (type) {
      case model::GgmlType::kQ4_K:  // d, dmin, scales[12], qs[128]
        putHalfBits(b, to_fp16(0.0008f).bits), putHalfBits(b, to_fp16(0.0004f).bits),
            bytes(12 + 128);
        break;
      case model::GgmlType::kQ5_K:  // d, dmin, scales[12], qh[32], qs[128]
        putHalfBits(b, to_fp16(0.0004f).bits), putHalfBits(b, to_fp16(0.0002f).bits),
            bytes(12 + 32 + 128);
        break;
      case model::GgmlType::kQ6_K:  // ql[128], qh[64], scales[16], d
        bytes(128 + 64 + 16), putHalfBits(b, to_fp16(0.0002f).bits);
        break;
      default:
        throw std::runtime_error("randomBlocks: not a K-quant: " +
                                 std::to_string(static_cast<int>(type)));
    }
  }
  return b;
}

// ---- metadata ----

inline std::string ggufArchOf(const model::ModelConfig& c) {
  switch (c.architecture) {
    case model::Architecture::kLlama:
      return "llama";
    case model::Architecture::kQwen2:
      return "qwen2";
    case model::Architecture::kQwen3:
      return "qwen3";
    default:
      throw std::runtime_error("ggufArchOf: no GGUF architecture for a draft");
  }
}

// {arch}.* hyperparameters of `c` (RoPE: default, linear or yarn; llama3 has no GGUF form).
inline void writeModelMetadata(GgufTestWriter& w, const model::ModelConfig& c) {
  const std::string a = ggufArchOf(c);
  w.kvString("general.architecture", a);
  w.kvU32(a + ".block_count", static_cast<uint32_t>(c.num_hidden_layers));
  w.kvU32(a + ".context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.kvU32(a + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.kvU32(a + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.kvU32(a + ".attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.kvU32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.kvU32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.kvU32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.kvU32(a + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.kvF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.kvF32(a + ".rope.freq_base", static_cast<float>(c.rope.theta));
  if (c.rope.type == model::RopeType::kLinear || c.rope.type == model::RopeType::kYarn) {
    w.kvString(a + ".rope.scaling.type",
               c.rope.type == model::RopeType::kLinear ? "linear" : "yarn");
    w.kvF32(a + ".rope.scaling.factor", static_cast<float>(c.rope.factor));
    if (c.rope.original_max_position_embeddings > 0) {
      w.kvU32(a + ".rope.scaling.original_context_length",
              static_cast<uint32_t>(c.rope.original_max_position_embeddings));
    }
  } else if (c.rope.type != model::RopeType::kDefault) {
    throw std::runtime_error("writeModelMetadata: llama3 RoPE has no GGUF metadata form");
  }
}

// A byte-level BPE vocabulary of `vocab` tokens (>= 260): the 256 byte symbols, two-letter
// merges, unreachable fillers, and the last three ids <|endoftext|> (eos), <|im_start|>, <|im_end|>
// as control tokens; a ChatML chat template.
inline void writeTokenizerMetadata(GgufTestWriter& w, int64_t vocab) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tokenizer::bytesToByteLevel(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  std::vector<std::string> merges;
  for (char x = 'a'; x <= 'z' && static_cast<int64_t>(tokens.size()) < vocab - 3; ++x) {
    for (char y = 'a'; y <= 'z' && static_cast<int64_t>(tokens.size()) < vocab - 3; ++y) {
      merges.push_back(std::string(1, x) + " " + std::string(1, y));
      tokens.push_back(std::string(1, x) + std::string(1, y));
      types.push_back(1);
    }
  }
  // Unreachable fillers up to the model's vocabulary size (no merge produces them).
  for (int i = 0; static_cast<int64_t>(tokens.size()) < vocab - 3; ++i) {
    tokens.push_back("<filler" + std::to_string(i) + ">");
    types.push_back(1);
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  w.kvString("tokenizer.ggml.model", "gpt2");
  w.kvString("tokenizer.ggml.pre", "gpt2");
  w.kvStringArray("tokenizer.ggml.tokens", tokens);
  w.kvI32Array("tokenizer.ggml.token_type", types);
  w.kvStringArray("tokenizer.ggml.merges", merges);
  w.kvU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab - 3));
  w.kvBool("tokenizer.ggml.add_bos_token", false);
  w.kvString("tokenizer.chat_template",
             "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ "
             "message['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
}

// ---- whole files ----

struct GgufFromFolderOptions {
  // ggml type of each tensor (by HF name); F32 when empty.
  std::function<model::GgmlType(const std::string& hf_name)> type;
  bool tokenizer = true;
};

// A GGUF holding the HF folder `dir`'s model (its tensors quantised as options.type says).
inline GgufTestWriter ggufFromFolder(const std::filesystem::path& dir,
                                     const GgufFromFolderOptions& options = {}) {
  const model::ModelConfig c = model::loadModelConfig(dir);
  const model::WeightStore store = model::WeightStore::openFolder(dir);
  GgufTestWriter w;
  writeModelMetadata(w, c);
  if (options.tokenizer) writeTokenizerMetadata(w, c.vocab_size);
  for (const std::string& name : store.names()) {
    const model::TensorInfo& info = store.info(name);
    const TensorView v = store.view(name);
    std::vector<float> values(static_cast<size_t>(info.numel()));
    loadFloats(v.data, info.dtype, 0, info.numel(), values.data());
    const int64_t rows = info.shape[0], cols = info.shape.size() > 1 ? info.shape[1] : 1;
    if (c.architecture == model::Architecture::kLlama && name.ends_with("q_proj.weight")) {
      values = permuteLikeLlamaCpp(values, c.num_attention_heads, rows, cols);
    } else if (c.architecture == model::Architecture::kLlama && name.ends_with("k_proj.weight")) {
      values = permuteLikeLlamaCpp(values, c.num_key_value_heads, rows, cols);
    }
    std::vector<uint64_t> dims(info.shape.rbegin(), info.shape.rend());  // ggml: fastest first
    const model::GgmlType type = options.type ? options.type(name) : model::GgmlType::kF32;
    w.tensor({ggufNameOf(name), dims, static_cast<uint32_t>(type), encodeAs(type, values), {}});
  }
  return w;
}

// A GGUF of the model `c` with random weights: norms F32 around 1, every matrix in the ggml
// type `type(hf_name)` (K-quants: random blocks; others: random values quantised).
inline GgufTestWriter randomGguf(const model::ModelConfig& c,
                                 const std::function<model::GgmlType(const std::string&)>& type,
                                 uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-0.5f, 0.5f);
  GgufTestWriter w;
  writeModelMetadata(w, c);
  writeTokenizerMetadata(w, c.vocab_size);
  for (const model::ExpectedTensor& e : model::expectedTensors(c)) {
    if (!e.required) continue;
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    std::vector<uint64_t> dims(e.shape.rbegin(), e.shape.rend());
    const model::GgmlType t = e.shape.size() == 1 ? model::GgmlType::kF32 : type(e.name);
    std::vector<uint8_t> data;
    if (t == model::GgmlType::kQ4_K || t == model::GgmlType::kQ5_K || t == model::GgmlType::kQ6_K) {
      data = randomBlocks(t, numel, rng);
    } else {
      std::vector<float> values(numel);
      for (float& v : values) v = e.shape.size() == 1 ? 1.0f + real(rng) : 0.1f * real(rng);
      data = encodeAs(t, values);
    }
    w.tensor({ggufNameOf(e.name), dims, static_cast<uint32_t>(t), std::move(data), {}});
  }
  return w;
}

}  // namespace es::test
