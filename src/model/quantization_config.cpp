#include "model/quantization_config.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"

namespace es::model {
namespace {

using nlohmann::json;

// A JSON value, shortened for an error message (a hostile config may hold megabytes).
std::string shortJson(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 80;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return escapeControl(text);
}

// Reads the fields of one JSON object below quantization_config; every error names the file and
// the field's path ("quantization_config.config_groups.group_0.weights.num_bits").
class Fields {
 public:
  Fields(const json& object, std::string_view where, std::string path)
      : object_(object), where_(where), path_(std::move(path)) {
    if (!object_.is_object()) {
      ES_THROW(FormatError, where_, ": ", path_, " must be an object, got ", shortJson(object_));
    }
  }

  std::string path(std::string_view name) const { return path_ + "." + std::string(name); }
  const std::string& where() const { return where_; }

  // nullptr when the field is absent or null.
  const json* find(std::string_view name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<int64_t> integer(std::string_view name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) {
      ES_THROW(FormatError, where_, ": ", path(name), " must be an integer, got ", shortJson(*v));
    }
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    }
    return v->get<int64_t>();
  }

  std::optional<bool> boolean(std::string_view name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      ES_THROW(FormatError, where_, ": ", path(name), " must be true or false, got ",
               shortJson(*v));
    }
    return v->get<bool>();
  }

  std::optional<std::string> string(std::string_view name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      ES_THROW(FormatError, where_, ": ", path(name), " must be a string, got ", shortJson(*v));
    }
    return v->get<std::string>();
  }

  std::vector<std::string> strings(std::string_view name) const {
    const json* v = find(name);
    std::vector<std::string> out;
    if (v == nullptr) return out;
    if (!v->is_array()) {
      ES_THROW(FormatError, where_, ": ", path(name), " must be a list of strings, got ",
               shortJson(*v));
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        ES_THROW(FormatError, where_, ": ", path(name), "[", i, "] must be a string, got ",
                 shortJson((*v)[i]));
      }
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  // "<where>: <path>.<name> = <value> is not supported (supported: <supported>)".
  [[noreturn]] void unsupported(std::string_view name, std::string_view supported) const {
    const json* v = find(name);
    ES_THROW(FormatError, where_, ": ", path(name), " = ", v ? shortJson(*v) : "null",
             " is not supported (supported: ", supported, ")");
  }

  // The field must be absent or null.
  void requireAbsent(std::string_view name, std::string_view why) const {
    if (find(name) != nullptr) unsupported(name, why);
  }

 private:
  const json& object_;
  std::string where_;
  std::string path_;
};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// group_size of AWQ / GPTQ: the int4 backend layout's groups (common/quant_format.h).
int32_t int4GroupSize(const Fields& q, std::optional<int64_t> given) {
  if (!given) return 128;
  if (*given != 32 && *given != 64 && *given != 128) q.unsupported("group_size", "32, 64, 128");
  return static_cast<int32_t>(*given);
}

void parseAwq(const Fields& q, QuantizationConfig& out) {
  const int64_t bits = q.integer("bits").value_or(4);
  if (bits != 4) q.unsupported("bits", "4");
  out.bits = 4;
  out.group = int4GroupSize(q, q.integer("group_size"));
  if (!q.boolean("zero_point").value_or(true)) {
    q.unsupported("zero_point", "true; symmetric AWQ without zero points is not supported");
  }
  out.zeroPoint = true;
  if (lower(q.string("version").value_or("gemm")) != "gemm") {
    q.unsupported("version", "\"gemm\": AutoAWQ's GEMM packing");
  }
  if (const auto backend = q.string("backend"); backend && lower(*backend) != "autoawq") {
    q.unsupported("backend", "\"autoawq\": llm-awq packs its tensors differently");
  }
  out.notConverted = q.strings("modules_to_not_convert");
}

void parseGptq(const Fields& q, QuantizationConfig& out) {
  const std::optional<int64_t> bits = q.integer("bits");
  if (!bits) ES_THROW(FormatError, q.where(), ": ", q.path("bits"), " is missing (supported: 4)");
  if (*bits != 4) q.unsupported("bits", "4");
  out.bits = 4;
  const std::optional<int64_t> group = q.integer("group_size");
  if (!group) {
    ES_THROW(FormatError, q.where(), ": ", q.path("group_size"),
             " is missing (supported: 32, 64, 128)");
  }
  out.group = int4GroupSize(q, group);
  if (q.boolean("desc_act").value_or(false)) {
    q.unsupported("desc_act", "false; act-order checkpoints permute k by g_idx");
  }
  out.symmetric = q.boolean("sym").value_or(true);
  out.zeroPoint = true;
  for (const char* name : {"checkpoint_format", "format"}) {
    if (const auto format = q.string(name); format && lower(*format) != "gptq") {
      q.unsupported(name, "\"gptq\", the v1 zero points (stored z - 1)");
    }
  }
  if (q.boolean("is_marlin_format").value_or(false)) {
    q.unsupported("is_marlin_format", "false; Marlin-repacked tensors are not read");
  }
  out.notConverted = q.strings("modules_to_not_convert");
}

void parseFp8Block(const Fields& q, QuantizationConfig& out) {
  if (lower(q.string("fmt").value_or("e4m3")) != "e4m3") q.unsupported("fmt", "\"e4m3\"");
  if (q.string("activation_scheme").value_or("dynamic") != "dynamic") {
    q.unsupported("activation_scheme", "\"dynamic\"");
  }
  const json* block = q.find("weight_block_size");
  if (block == nullptr) {
    ES_THROW(FormatError, q.where(), ": ", q.path("weight_block_size"),
             " is missing (supported: [128, 128]; per-tensor FP8 scales are not supported)");
  }
  if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() != 128 ||
      (*block)[1].get<int64_t>() != 128) {
    q.unsupported("weight_block_size", "[128, 128]");
  }
  out.bits = 8;
  out.blockN = 128;
  out.blockK = 128;
  out.group = 128;
  out.symmetric = true;
  out.notConverted = q.strings("modules_to_not_convert");
}

// A compressed-tensors QuantizationArgs of 8-bit floats: {num_bits 8, type "float"}.
void requireFloat8(const Fields& args) {
  if (args.integer("num_bits") != 8) args.unsupported("num_bits", "8");
  if (args.string("type") != "float") args.unsupported("type", "\"float\"");
}

void parseCompressedTensors(const Fields& q, QuantizationConfig& out) {
  const std::optional<std::string> format = q.string("format");
  if (format != "float-quantized" && format != "naive-quantized") {
    q.unsupported("format", "\"float-quantized\", \"naive-quantized\"");
  }
  if (const auto status = q.string("quantization_status"); status && *status != "compressed") {
    q.unsupported("quantization_status", "\"compressed\"");
  }
  q.requireAbsent("kv_cache_scheme", "null; the KV cache is not quantized");
  q.requireAbsent("transform_config", "null");
  if (const json* sparsity = q.find("sparsity_config"); sparsity && !sparsity->empty()) {
    const Fields s(*sparsity, q.where(), q.path("sparsity_config"));
    if (s.string("format").value_or("dense") != "dense") {
      s.unsupported("format", "\"dense\"; sparse checkpoints are not read");
    }
  }

  const json* groups = q.find("config_groups");
  if (groups == nullptr) {
    ES_THROW(FormatError, q.where(), ": ", q.path("config_groups"),
             " is missing (supported: one group of FP8 per-channel weights)");
  }
  const Fields groupsFields(*groups, q.where(), q.path("config_groups"));
  if (groups->size() != 1) {
    ES_THROW(FormatError, q.where(), ": ", q.path("config_groups"), " has ", groups->size(),
             " groups (supported: exactly one, FP8 per-channel weights on every Linear)");
  }
  const json::const_iterator only = groups->begin();
  const Fields group(only.value(), q.where(), groupsFields.path(escapeControl(only.key())));
  const std::vector<std::string> targets = group.strings("targets");
  if (targets != std::vector<std::string>{"Linear"}) group.unsupported("targets", "[\"Linear\"]");
  if (const auto groupFormat = group.string("format");
      groupFormat && *groupFormat != "float-quantized" && *groupFormat != "naive-quantized") {
    group.unsupported("format", "\"float-quantized\", \"naive-quantized\"");
  }
  group.requireAbsent("output_activations", "null");

  const json* weightsValue = group.find("weights");
  if (weightsValue == nullptr) {
    ES_THROW(FormatError, q.where(), ": ", group.path("weights"),
             " is missing (supported: FP8 per-channel weights)");
  }
  const Fields weights(*weightsValue, q.where(), group.path("weights"));
  requireFloat8(weights);
  if (weights.string("strategy") != "channel") weights.unsupported("strategy", "\"channel\"");
  if (weights.boolean("symmetric") != true) weights.unsupported("symmetric", "true");
  if (weights.find("dynamic") != nullptr && weights.boolean("dynamic") != false) {
    weights.unsupported("dynamic", "false");
  }
  weights.requireAbsent("group_size", "null for per-channel scales");
  weights.requireAbsent("block_structure", "null for per-channel scales");
  if (const json* actorder = weights.find("actorder");
      actorder != nullptr && !(actorder->is_boolean() && !actorder->get<bool>())) {
    weights.unsupported("actorder", "null or false");
  }

  if (const json* inputValue = group.find("input_activations")) {
    const Fields input(*inputValue, q.where(), group.path("input_activations"));
    requireFloat8(input);
    // compressed-tensors' default is static (dynamic false); "local" dynamic scales are computed
    // at run time like true.
    const json* dynamic = input.find("dynamic");
    bool isDynamic = false;
    if (dynamic != nullptr) {
      if (dynamic->is_boolean()) {
        isDynamic = dynamic->get<bool>();
      } else if (dynamic->is_string() && *dynamic == "local") {
        isDynamic = true;
      } else {
        input.unsupported("dynamic", "true, false or \"local\"");
      }
    }
    out.staticInputScale = !isDynamic;
  }

  out.bits = 8;
  out.group = 0;
  out.symmetric = true;
  out.notConverted = q.strings("ignore");
}

}  // namespace

std::string_view quantMethodName(QuantMethod method) {
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kAwq:
      return "awq";
    case QuantMethod::kGptq:
      return "gptq";
    case QuantMethod::kFp8Block:
      return "fp8_block";
    case QuantMethod::kFp8Channel:
      return "fp8_channel";
  }
  return "?";
}

bool QuantizationConfig::isNotConverted(std::string_view module) const {
  return std::find(notConverted.begin(), notConverted.end(), module) != notConverted.end();
}

QuantizationConfig parseQuantizationConfig(const json& config, std::string_view where) {
  QuantizationConfig out;
  out.source = std::string(where);
  if (!config.is_object()) {
    ES_THROW(FormatError, where, ": the config must be a JSON object, got ", shortJson(config));
  }
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return out;
  const Fields q(*it, where, "quantization_config");
  const std::optional<std::string> method = q.string("quant_method");
  if (!method) {
    ES_THROW(FormatError, where, ": ", q.path("quant_method"),
             " is missing (supported: awq, gptq, fp8, compressed-tensors)");
  }
  if (*method == "awq") {
    out.method = QuantMethod::kAwq;
    parseAwq(q, out);
  } else if (*method == "gptq") {
    out.method = QuantMethod::kGptq;
    parseGptq(q, out);
  } else if (*method == "fp8") {
    out.method = QuantMethod::kFp8Block;
    parseFp8Block(q, out);
  } else if (*method == "compressed-tensors") {
    out.method = QuantMethod::kFp8Channel;
    parseCompressedTensors(q, out);
  } else {
    q.unsupported("quant_method", "awq, gptq, fp8, compressed-tensors");
  }
  return out;
}

QuantizationConfig loadQuantizationConfig(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  const std::string text = readInputFile(file, kMaxConfigJsonBytes, "loadQuantizationConfig");
  return parseQuantizationConfig(parseJsonStrict(text, file.string()), file.string());
}

}  // namespace es::model
