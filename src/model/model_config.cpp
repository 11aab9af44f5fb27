#include "model/model_config.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"
#include "model/gguf_convert.h"
#include "model/gguf_weights.h"
#include "model/safetensors.h"

namespace es::model {
namespace {

using nlohmann::json;

std::string shortJson(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 80) + "...";
  return text;
}

// Typed access to one JSON object with errors that name the file and the field path.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  const std::string& source() const { return source_; }
  std::string path(std::string_view key) const { return prefix_ + std::string(key); }

  // Null counts as absent (transformers writes "sliding_window": null and the like).
  const json* find(std::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(std::string_view key, const json& value,
                         std::string_view requirement) const {
    ES_THROW(FormatError, source_, ": field '", path(key), "' = ", shortJson(value), " ",
             requirement);
  }
  template <typename Value>
  [[noreturn]] void failValue(std::string_view key, const Value& value,
                              std::string_view requirement) const {
    ES_THROW(FormatError, source_, ": field '", path(key), "' = ", value, " ", requirement);
  }

  std::optional<int64_t> optInt(std::string_view key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() &&
         v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      fail(key, *v, "must be an integer");
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) failValue(key, x, detail::concat("must be in [", lo, ", ", hi, "]"));
    return x;
  }
  int64_t reqInt(std::string_view key, int64_t lo, int64_t hi) const {
    auto v = optInt(key, lo, hi);
    if (!v) ES_THROW(FormatError, source_, ": required field '", path(key), "' is missing");
    return *v;
  }

  // Finite number in (lo, hi] when lo_open, else [lo, hi].
  std::optional<double> optDouble(std::string_view key, double lo, double hi,
                                  bool lo_open = true) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail(key, *v, "must be a number");
    const double x = v->get<double>();
    const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
    if (!ok)
      fail(key, *v,
           detail::concat("must be finite and in ", lo_open ? "(" : "[", lo, ", ", hi, "]"));
    return x;
  }
  double reqDouble(std::string_view key, double lo, double hi, std::string_view why) const {
    auto v = optDouble(key, lo, hi);
    if (!v)
      ES_THROW(FormatError, source_, ": required field '", path(key), "' is missing (", why, ")");
    return *v;
  }

  std::optional<bool> optBool(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(key, *v, "must be true or false");
    return v->get<bool>();
  }
  std::optional<std::string> optString(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, *v, "must be a string");
    return v->get<std::string>();
  }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;
};

constexpr double kHuge = 1e30;

Architecture parseArchitecture(const Fields& f) {
  const json* archs = f.find("architectures");
  if (archs == nullptr)
    ES_THROW(FormatError, f.source(), ": required field 'architectures' is missing");
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    f.fail("architectures", *archs, "must be a non-empty list of class names");
  }
  const std::string name = (*archs)[0].get<std::string>();
  for (Architecture a : {Architecture::kQwen3, Architecture::kLlama, Architecture::kQwen2,
                         Architecture::kDFlashDraft}) {
    if (name == architectureName(a)) return a;
  }
  ES_THROW(FormatError, f.source(), ": unsupported architecture '", name,
           "' (supported: Qwen3ForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM, DFlashDraftModel)");
}

RopeType parseRopeType(const Fields& f, const std::string& where, bool type_required) {
  const json* a = f.find("rope_type");
  const json* b = f.find("type");  // transformers 4.x's older spelling
  if (a != nullptr && b != nullptr && *a != *b) {
    ES_THROW(FormatError, f.source(), ": ", where, " has 'rope_type' = ", shortJson(*a),
             " and 'type' = ", shortJson(*b), "; they must agree");
  }
  const json* t = a != nullptr ? a : b;
  if (t == nullptr) {
    if (type_required) ES_THROW(FormatError, f.source(), ": ", where, " has no 'rope_type'");
    return RopeType::kDefault;
  }
  const char* key = a != nullptr ? "rope_type" : "type";
  if (!t->is_string()) f.fail(key, *t, "must be a string");
  const std::string name = t->get<std::string>();
  for (RopeType r : {RopeType::kDefault, RopeType::kLinear, RopeType::kLlama3, RopeType::kYarn}) {
    if (name == ropeTypeName(r)) return r;
  }
  ES_THROW(FormatError, f.source(), ": field '", f.path(key), "' = '", name,
           "' is an unsupported RoPE type (supported: default, linear, llama3, yarn)");
}

RopeConfig parseRope(const Fields& top) {
  RopeConfig rope;
  const auto top_theta = top.optDouble("rope_theta", 0, kHuge);
  const json* params = top.find("rope_parameters");
  std::string where = "rope_parameters";
  bool type_required = false;
  if (params == nullptr) {
    params = top.find("rope_scaling");
    where = "rope_scaling";
    type_required = true;
  }
  if (params == nullptr) {
    rope.theta = top_theta.value_or(10000.0);
    return rope;
  }
  if (!params->is_object()) top.fail(where, *params, "must be an object or null");
  if (where == "rope_parameters" &&
      (params->contains("full_attention") || params->contains("sliding_attention"))) {
    ES_THROW(FormatError, top.source(),
             ": per-layer-type 'rope_parameters' (keyed by attention type) "
             "are not supported by these architectures");
  }
  const Fields p(*params, top.source(), where + ".");
  rope.type = parseRopeType(p, where, type_required);

  const auto inner_theta = p.optDouble("rope_theta", 0, kHuge);
  if (inner_theta && top_theta && *inner_theta != *top_theta) {
    ES_THROW(FormatError, top.source(), ": 'rope_theta' = ", *top_theta, " and '", where,
             ".rope_theta' = ", *inner_theta, " disagree");
  }
  rope.theta = inner_theta ? *inner_theta : top_theta.value_or(10000.0);

  switch (rope.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      rope.factor = p.reqDouble("factor", 0, kHuge, "linear RoPE scaling needs it");
      break;
    case RopeType::kLlama3: {
      rope.factor = p.reqDouble("factor", 0, kHuge, "llama3 RoPE scaling needs it");
      rope.low_freq_factor =
          p.reqDouble("low_freq_factor", 0, kHuge, "llama3 RoPE scaling needs it");
      rope.high_freq_factor =
          p.reqDouble("high_freq_factor", 0, kHuge, "llama3 RoPE scaling needs it");
      if (rope.high_freq_factor <= rope.low_freq_factor) {
        ES_THROW(FormatError, top.source(), ": '", where,
                 ".high_freq_factor' = ", rope.high_freq_factor,
                 " must be > low_freq_factor = ", rope.low_freq_factor,
                 " (the llama3 ramp divides by their difference)");
      }
      auto original = p.optInt("original_max_position_embeddings", 1, kMaxPositions);
      if (!original) {
        ES_THROW(FormatError, top.source(), ": required field '", where,
                 ".original_max_position_embeddings' is missing (llama3 RoPE scaling needs it)");
      }
      rope.original_max_position_embeddings = *original;
      break;
    }
    case RopeType::kYarn: {
      rope.factor = p.reqDouble("factor", 0, kHuge, "yarn RoPE scaling needs it");
      rope.original_max_position_embeddings =
          p.optInt("original_max_position_embeddings", 1, kMaxPositions).value_or(0);
      rope.beta_fast = p.optDouble("beta_fast", 0, kHuge).value_or(32.0);
      rope.beta_slow = p.optDouble("beta_slow", 0, kHuge).value_or(1.0);
      rope.attention_factor = p.optDouble("attention_factor", 0, kHuge);
      rope.mscale = p.optDouble("mscale", 0, kHuge, /*lo_open=*/false);
      rope.mscale_all_dim = p.optDouble("mscale_all_dim", 0, kHuge, /*lo_open=*/false);
      rope.truncate = p.optBool("truncate").value_or(true);
      break;
    }
  }
  return rope;
}

std::optional<DType> parseDType(const Fields& f) {
  // 5.x writes "dtype", 4.x "torch_dtype"; prefer the newer one.
  const char* key = f.find("dtype") != nullptr ? "dtype" : "torch_dtype";
  auto name = f.optString(key);
  if (!name) return std::nullopt;
  if (*name == "bfloat16") return DType::kBF16;
  if (*name == "float16") return DType::kF16;
  if (*name == "float32") return DType::kF32;
  ES_THROW(FormatError, f.source(), ": field '", key, "' = '", *name,
           "' is an unsupported dtype (supported: bfloat16, float16, float32)");
}

void parseLayerTypes(const Fields& f, ModelConfig& c) {
  const bool qwen_family = c.architecture != Architecture::kLlama;
  const bool sliding_enabled = f.optBool("use_sliding_window").value_or(!qwen_family);
  std::optional<int64_t> window = f.optInt("sliding_window", 1, kMaxPositions);
  if (qwen_family && !sliding_enabled)
    window.reset();  // Qwen: the window only applies when enabled

  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), LayerType::kFullAttention);
  if (const json* types = f.find("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_hidden_layers)) {
      f.fail("layer_types", *types,
             detail::concat("must be a list of num_hidden_layers = ", c.num_hidden_layers,
                            " entries"));
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        c.layer_types[i] = LayerType::kSlidingAttention;
      } else if (t != "full_attention") {
        ES_THROW(FormatError, f.source(), ": field 'layer_types[", i, "]' = ", shortJson(t),
                 " must be \"full_attention\" or \"sliding_attention\"");
      }
    }
  } else if (qwen_family && window) {
    // transformers' Qwen2/Qwen3 default: layers from max_window_layers on slide.
    const int64_t first = f.optInt("max_window_layers", 0, kMaxLayers).value_or(28);
    for (int64_t i = first; i < c.num_hidden_layers; ++i)
      c.layer_types[static_cast<size_t>(i)] = LayerType::kSlidingAttention;
  }
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    if (c.layer_types[i] == LayerType::kSlidingAttention) {
      if (!window) {
        ES_THROW(
            FormatError, f.source(), ": layer ", i,
            " is sliding_attention but 'sliding_window' is null or disabled (use_sliding_window)");
      }
      c.sliding_window = window;
      break;
    }
  }
}

void parseDFlash(const Fields& f, ModelConfig& c) {
  DFlashConfig d;
  d.block_size = f.reqInt("block_size", 2, kMaxDraftBlockSize);
  const json* dj = f.find("dflash_config");
  if (dj == nullptr)
    ES_THROW(FormatError, f.source(), ": required field 'dflash_config' is missing");
  if (!dj->is_object()) f.fail("dflash_config", *dj, "must be an object");
  const Fields df(*dj, f.source(), "dflash_config.");
  d.mask_token_id = df.reqInt("mask_token_id", 0, kMaxVocab - 1);

  d.num_target_layers = f.optInt("num_target_layers", 1, kMaxLayers);
  if (!d.num_target_layers) d.num_target_layers = df.optInt("num_target_layers", 1, kMaxLayers);

  if (const json* ids = df.find("target_layer_ids")) {
    if (!ids->is_array() || ids->empty())
      df.fail("target_layer_ids", *ids, "must be a non-empty list");
    const int64_t hi = d.num_target_layers ? *d.num_target_layers - 1 : kMaxLayers - 1;
    std::set<int64_t> seen;
    for (size_t i = 0; i < ids->size(); ++i) {
      const json& v = (*ids)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > hi) {
        ES_THROW(FormatError, f.source(), ": field 'dflash_config.target_layer_ids[", i,
                 "]' = ", shortJson(v), " must be an integer in [0, ", hi, "]",
                 d.num_target_layers ? " (num_target_layers - 1)" : "");
      }
      if (!seen.insert(v.get<int64_t>()).second) {
        ES_THROW(FormatError, f.source(), ": field 'dflash_config.target_layer_ids' taps layer ",
                 v.get<int64_t>(), " twice");
      }
      d.target_layer_ids.push_back(v.get<int64_t>());
    }
    d.target_layer_ids_explicit = true;
  } else if (d.num_target_layers) {
    d.target_layer_ids = defaultDFlashTargetLayerIds(*d.num_target_layers, c.num_hidden_layers);
    for (int64_t id : d.target_layer_ids) {
      if (id < 0 || id >= *d.num_target_layers) {
        ES_THROW(FormatError, f.source(), ": default DFlash tap ", id,
                 " for num_target_layers = ", *d.num_target_layers, " and ", c.num_hidden_layers,
                 " draft layers is out of range; give dflash_config.target_layer_ids");
      }
    }
  }
  c.dflash = d;
}

}  // namespace

std::string_view architectureName(Architecture a) {
  switch (a) {
    case Architecture::kQwen3:
      return "Qwen3ForCausalLM";
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kDFlashDraft:
      return "DFlashDraftModel";
  }
  return "?";
}

std::string_view ropeTypeName(RopeType t) {
  switch (t) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
  }
  return "?";
}

std::vector<int64_t> defaultDFlashTargetLayerIds(int64_t num_target_layers,
                                                 int64_t num_draft_layers) {
  ES_CHECK_ARG(num_target_layers >= 1 && num_target_layers <= kMaxLayers,
               "defaultDFlashTargetLayerIds", "num_target_layers", num_target_layers,
               "must be in [1, ", kMaxLayers, "]");
  ES_CHECK_ARG(num_draft_layers >= 1 && num_draft_layers <= kMaxLayers,
               "defaultDFlashTargetLayerIds", "num_draft_layers", num_draft_layers,
               "must be in [1, ", kMaxLayers, "]");
  if (num_draft_layers == 1) return {num_target_layers / 2};
  std::vector<int64_t> ids;
  const int64_t den = num_draft_layers - 1;
  for (int64_t i = 0; i < num_draft_layers; ++i) {
    // 1 + i (L_t - 4) / (n - 1) = num / den exactly; round half to even.
    const int64_t num = den + i * (num_target_layers - 4);
    int64_t q = num / den;
    int64_t r = num % den;
    if (r < 0) {  // floor division for a negative numerator (L_t < 4)
      q -= 1;
      r += den;
    }
    if (2 * r > den || (2 * r == den && (q % 2 != 0))) q += 1;
    ids.push_back(q);
  }
  return ids;
}

std::vector<int64_t> ModelConfig::resolvedTargetLayerIds(int64_t target_num_layers) const {
  ES_CHECK_ARG(isDraft() && dflash.has_value(), "ModelConfig::resolvedTargetLayerIds",
               "architecture", architectureName(architecture), "must be DFlashDraftModel");
  ES_CHECK_ARG(target_num_layers >= 1 && target_num_layers <= kMaxLayers,
               "ModelConfig::resolvedTargetLayerIds", "target_num_layers", target_num_layers,
               "must be in [1, ", kMaxLayers, "]");
  if (dflash->num_target_layers && *dflash->num_target_layers != target_num_layers) {
    ES_THROW(
        InvalidArgument,
        "ModelConfig::resolvedTargetLayerIds: argument 'target_num_layers' = ", target_num_layers,
        " does not match the draft's num_target_layers = ", *dflash->num_target_layers, " (",
        source, ")");
  }
  std::vector<int64_t> ids =
      dflash->target_layer_ids_explicit
          ? dflash->target_layer_ids
          : defaultDFlashTargetLayerIds(target_num_layers, num_hidden_layers);
  for (int64_t id : ids) {
    if (id < 0 || id >= target_num_layers) {
      ES_THROW(
          InvalidArgument,
          "ModelConfig::resolvedTargetLayerIds: argument 'target_num_layers' = ", target_num_layers,
          " does not contain the draft's tapped layer ", id, " (", source, ")");
    }
  }
  return ids;
}

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << architectureName(architecture) << ": layers " << num_hidden_layers << ", hidden "
     << hidden_size << ", heads " << num_attention_heads << "/" << num_key_value_heads << " x "
     << head_dim << ", intermediate " << intermediate_size << ", vocab " << vocab_size << ", rope "
     << ropeTypeName(rope.type) << " theta " << rope.theta;
  if (rope.type != RopeType::kDefault) os << " factor " << rope.factor;
  if (tie_word_embeddings) os << ", tied embeddings";
  if (qkv_bias) os << ", qkv bias";
  if (qk_norm) os << ", q/k norm";
  if (sliding_window) os << ", sliding window " << *sliding_window;
  if (dtype) os << ", " << dtype_name(*dtype);
  if (dflash) {
    os << ", block " << dflash->block_size << ", mask token " << dflash->mask_token_id
       << ", taps [";
    for (size_t i = 0; i < dflash->target_layer_ids.size(); ++i)
      os << (i ? "," : "") << dflash->target_layer_ids[i];
    os << "]";
  }
  return os.str();
}

ModelConfig parseModelConfig(std::string_view json_text, std::string_view source) {
  const json root = parseJsonStrict(json_text, source);
  if (!root.is_object()) ES_THROW(FormatError, source, ": config must be a JSON object");
  const Fields f(root, std::string(source), "");

  ModelConfig c;
  c.source = std::string(source);
  c.architecture = parseArchitecture(f);
  c.model_type = f.optString("model_type").value_or("");
  const bool qwen3_layers =
      c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kDFlashDraft;

  if (auto act = f.optString("hidden_act"); act && *act != "silu") {
    ES_THROW(FormatError, source, ": field 'hidden_act' = '", *act,
             "' is unsupported (the MLP is SwiGLU: silu)");
  }

  c.hidden_size = f.reqInt("hidden_size", 1, kMaxHiddenSize);
  c.intermediate_size = f.reqInt("intermediate_size", 1, kMaxIntermediateSize);
  c.num_hidden_layers = f.reqInt("num_hidden_layers", 1, kMaxLayers);
  c.num_attention_heads = f.reqInt("num_attention_heads", 1, kMaxHeads);
  c.num_key_value_heads =
      f.optInt("num_key_value_heads", 1, kMaxHeads).value_or(c.num_attention_heads);
  c.vocab_size = f.reqInt("vocab_size", 1, kMaxVocab);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    ES_THROW(FormatError, source, ": field 'num_key_value_heads' = ", c.num_key_value_heads,
             " must divide num_attention_heads = ", c.num_attention_heads);
  }
  if (auto hd = f.optInt("head_dim", 1, kMaxHeadDim)) {
    c.head_dim = *hd;
  } else if (qwen3_layers) {
    c.head_dim = 128;  // Qwen3Config's default, independent of hidden_size
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      ES_THROW(FormatError, source, ": field 'num_attention_heads' = ", c.num_attention_heads,
               " must divide hidden_size = ", c.hidden_size, " when head_dim is not given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim > kMaxHeadDim) {
      ES_THROW(FormatError, source, ": head_dim = hidden_size / num_attention_heads = ", c.head_dim,
               " exceeds the limit ", kMaxHeadDim);
    }
  }
  if (c.head_dim % 2 != 0) {
    ES_THROW(FormatError, source, ": head_dim = ", c.head_dim,
             " must be even (RoPE rotates pairs)");
  }

  const int64_t default_positions = c.architecture == Architecture::kLlama ? 2048 : 32768;
  c.max_position_embeddings =
      f.optInt("max_position_embeddings", 1, kMaxPositions).value_or(default_positions);
  c.rms_norm_eps = f.optDouble("rms_norm_eps", 0, 1.0).value_or(1e-6);
  c.tie_word_embeddings = f.optBool("tie_word_embeddings").value_or(false);

  const bool attention_bias = f.optBool("attention_bias").value_or(false);
  switch (c.architecture) {
    case Architecture::kQwen2:
      c.qkv_bias = true;  // hard-wired in Qwen2Attention; o_proj has none
      break;
    case Architecture::kLlama:
      c.qkv_bias = c.o_bias = attention_bias;
      c.mlp_bias = f.optBool("mlp_bias").value_or(false);
      break;
    case Architecture::kQwen3:
    case Architecture::kDFlashDraft:
      c.qkv_bias = c.o_bias = attention_bias;
      break;
  }
  c.qk_norm = qwen3_layers;

  c.rope = parseRope(f);
  c.dtype = parseDType(f);
  parseLayerTypes(f, c);

  c.bos_token_id = f.optInt("bos_token_id", 0, kMaxVocab - 1);
  if (const json* eos = f.find("eos_token_id")) {
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i) {
        const json& v = (*eos)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxVocab) {
          ES_THROW(FormatError, source, ": field 'eos_token_id[", i, "]' = ", shortJson(v),
                   " must be an integer in [0, ", kMaxVocab - 1, "]");
        }
        c.eos_token_ids.push_back(v.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(*f.optInt("eos_token_id", 0, kMaxVocab - 1));
    }
  }

  if (c.architecture == Architecture::kDFlashDraft) parseDFlash(f, c);
  return c;
}

ModelConfig loadModelConfig(const std::filesystem::path& path) {
  // A GGUF model carries its config in its metadata (the config.json `convert` would write).
  if (isGgufPath(path)) return ggufModelConfig(GgufFile::open(path).header());
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(path, ec);
  const std::filesystem::path file = folder ? path / "config.json" : path;
  // Missing altogether (a dangling link counts as present): say what is expected. Anything else
  // that is there is opened through InputFile, which names what is wrong with it (a FIFO, a
  // directory, a device, over the size limit).
  if (!std::filesystem::exists(std::filesystem::symlink_status(file, ec))) {
    ES_THROW(InvalidArgument, "loadModelConfig: argument 'path' = ", path.string(),
             folder ? " has no config.json (expected a model folder containing config.json)"
                    : " does not exist (expected a model folder containing config.json)");
  }
  return parseModelConfig(readInputFile(file, kMaxConfigJsonBytes, "loadModelConfig"),
                          file.string());
}

}  // namespace es::model
