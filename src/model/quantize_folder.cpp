#include "model/quantize_folder.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "common/dtype_convert.h"
#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"
#include "common/quant_format.h"
#include "model/gguf_weights.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weight_names.h"
#include "model/weight_store.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr uint64_t kCopyChunkBytes = 64u << 20;  // a copied tensor streams in pieces this large

// The safetensors name of a copied tensor's dtype (checkWeights admits bf16, f16, f32 only).
std::string copiedDTypeName(DType t) {
  const bool dense = t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
  if (!dense) ES_THROW(InvalidArgument, "quantize: dtype ", dtype_name(t), " cannot be copied");
  return std::string(safetensorsDTypeName(t));
}

// One tensor of the input and what it becomes: a copy, or the tensors of one quantized linear.
struct Unit {
  std::string source;  // input tensor name
  bool quantize = false;
  std::vector<SafetensorsEntry> outputs;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& e : outputs) b += e.bytes;
    return b;
  }
};

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj".
std::string moduleOf(const std::string& weightName) {
  return weightName.substr(0, weightName.size() - std::string_view(".weight").size());
}

// Why the linear `name` [n, k] cannot be written in the chosen format, or "" when it can.
std::string quantizeRejection(const std::string& name, int64_t n, int64_t k,
                              const QuantizeOptions& options) {
  if (options.to != QuantizeTo::kInt4) return "";  // fp8 blocks take any n and k (ragged ends)
  if (const char* why = quantLayoutRejection(QuantFormat::kInt4, k, options.group)) {
    int32_t fits = 0;
    for (int32_t g : {128, 64, 32}) {
      if (quantLayoutRejection(QuantFormat::kInt4, k, g) == nullptr) {
        fits = g;
        break;
      }
    }
    return detail::concat("tensor ", quoteShort(name), " [", n, ", ", k,
                          "] cannot be int4 with --group ", options.group, ": ", why,
                          fits > 0 ? detail::concat(" (--group ", fits, " fits)") : "");
  }
  if (n % kAwqPackFactor != 0) {
    return detail::concat("tensor ", quoteShort(name), " [", n, ", ", k, "]: N = ", n,
                          " is not a multiple of 8 (AWQ packs 8 output features in each int32)");
  }
  return "";
}

void checkOptions(const QuantizeOptions& options) {
  // The group rule is quant_format's; 384 is a multiple of every group it allows, so only the
  // group itself is judged.
  if (options.to == QuantizeTo::kInt4) {
    if (const char* why = quantLayoutRejection(QuantFormat::kInt4, 384, options.group))
      ES_THROW(InvalidArgument, "quantize: argument '--group' = ", options.group, ": ", why);
  }
  if (options.maxShardBytes == 0) {
    ES_THROW(InvalidArgument, "quantize: the shard size must be at least 1 byte");
  }
}

// IN must be a model folder: not a GGUF file (convert it first), not anything else.
void checkInput(const fs::path& in) {
  std::error_code ec;
  if (!fs::exists(in, ec)) {
    ES_THROW(InvalidArgument, "quantize: IN_FOLDER ", in.string(), " does not exist");
  }
  if (!fs::is_directory(in, ec)) {
    if (isGgufPath(in)) {
      ES_THROW(InvalidArgument, "quantize: IN_FOLDER ", in.string(),
               " is a GGUF file; convert it first (edgespec convert ", in.string(),
               " FOLDER), then quantize the folder");
    }
    ES_THROW(InvalidArgument, "quantize: IN_FOLDER ", in.string(),
             " is not a folder (expected a Hugging Face model folder with config.json)");
  }
  if (!fs::exists(in / "config.json", ec)) {
    ES_THROW(InvalidArgument, "quantize: IN_FOLDER ", in.string(),
             " is not a model folder (it has no config.json)");
  }
}

// A config.json that declares quantized weights (transformers' quantization_config, or the
// compression_config of older compressed-tensors checkpoints): there is nothing to quantize.
void checkNotQuantized(const nlohmann::json& config, const fs::path& path) {
  if (!config.is_object()) return;  // parseModelConfig names what is wrong with it
  for (const char* key : {"quantization_config", "compression_config"}) {
    if (!config.contains(key)) continue;
    const nlohmann::json& q = config[key];
    std::string method = "?";
    if (q.is_object() && q.contains("quant_method")) {
      const nlohmann::json& m = q["quant_method"];
      method = quoteShort(m.is_string() ? m.get<std::string>() : m.dump());
    }
    ES_THROW(FormatError, "quantize: ", path.string(), " has a ", key, " (quant_method ", method,
             "): the model is quantized already; quantize takes a bf16, f16 or f32 model");
  }
}

// OUT: absent, or an empty folder (any folder with force), and never IN itself.
void checkOutput(const fs::path& in, const fs::path& out, bool force) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) {
    ES_THROW(InvalidArgument, "quantize: OUT_FOLDER ", out.string(), " exists and is not a folder");
  }
  if (fs::equivalent(in, out, ec)) {
    ES_THROW(InvalidArgument, "quantize: OUT_FOLDER ", out.string(),
             " is IN_FOLDER; write the quantized model to another folder");
  }
  if (!force && !fs::is_empty(out, ec)) {
    ES_THROW(InvalidArgument, "quantize: OUT_FOLDER ", out.string(),
             " exists and is not empty (pass --force to write into it)");
  }
}

// Weight files a folder may hold, which are never copied and which a forced run removes from OUT
// (stale shards would mix with the new ones).
bool isWeightFile(const std::string& name) {
  const auto endsWith = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  const auto startsWith = [&](std::string_view s) { return name.rfind(s, 0) == 0; };
  return name == kSingleWeightsFile || name == kWeightsIndexFile ||
         (startsWith("model-") && endsWith(".safetensors")) ||
         (startsWith("pytorch_model") && (endsWith(".bin") || endsWith(".bin.index.json")));
}

// The config.json of OUT: IN's, key order kept, with the quantization_config of the format.
std::string outputConfig(const std::string& text, const QuantizeOptions& options) {
  OrderedJson config = OrderedJson::parse(text);
  if (options.to == QuantizeTo::kInt4) {
    config["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4},         {"group_size", options.group},
        {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  } else {
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
  }
  return config.dump(2) + "\n";
}

// The units of the input, in name order; every quantized linear's shape checked first.
std::vector<Unit> planUnits(const WeightStore& store, const ModelConfig& config,
                            const QuantizeOptions& options) {
  const std::vector<std::string> linears = quantizedLinearNames(config);
  const std::set<std::string, std::less<>> quantized(linears.begin(), linears.end());
  std::vector<Unit> units;
  std::vector<std::string> rejections;
  for (const std::string& name : store.names()) {
    const TensorInfo& info = store.info(name);
    Unit u{.source = name, .quantize = quantized.count(name) != 0, .outputs = {}};
    if (!u.quantize) {
      u.outputs.push_back({.name = name,
                           .dtype = copiedDTypeName(info.dtype),
                           .shape = info.shape,
                           .bytes = info.byteSize()});
      units.push_back(std::move(u));
      continue;
    }
    const int64_t n = info.shape.at(0), k = info.shape.at(1);
    if (std::string why = quantizeRejection(name, n, k, options); !why.empty()) {
      rejections.push_back(std::move(why));
      continue;
    }
    const std::string module = moduleOf(name);
    const auto un = static_cast<uint64_t>(n), uk = static_cast<uint64_t>(k);
    if (options.to == QuantizeTo::kInt4) {
      const int64_t groups = k / options.group, words = n / kAwqPackFactor;
      const auto ug = static_cast<uint64_t>(groups), uw = static_cast<uint64_t>(words);
      u.outputs.push_back({module + ".qweight", "I32", {k, words}, uk * uw * 4});
      u.outputs.push_back({module + ".qzeros", "I32", {groups, words}, ug * uw * 4});
      u.outputs.push_back({module + ".scales", "F16", {groups, n}, ug * un * 2});
    } else {
      const int64_t rowBlocks = (n + kFp8BlockSize - 1) / kFp8BlockSize;
      const int64_t colBlocks = (k + kFp8BlockSize - 1) / kFp8BlockSize;
      u.outputs.push_back({name, "F8_E4M3", {n, k}, un * uk});
      u.outputs.push_back({module + ".weight_scale_inv",
                           "F32",
                           {rowBlocks, colBlocks},
                           static_cast<uint64_t>(rowBlocks * colBlocks) * 4});
    }
    units.push_back(std::move(u));
  }
  if (!rejections.empty()) {
    std::string text = rejections.front();
    if (rejections.size() > 1)
      text += " (and " + std::to_string(rejections.size() - 1) + " more like it)";
    ES_THROW(InvalidArgument, "quantize: ", text);
  }
  return units;
}

// Units split into shards of at most maxShardBytes of data (a unit larger than that gets a shard
// of its own); a unit's tensors stay together.
std::vector<std::vector<const Unit*>> shardUnits(const std::vector<Unit>& units,
                                                 uint64_t maxShardBytes) {
  std::vector<std::vector<const Unit*>> shards(1);
  uint64_t bytes = 0;
  for (const Unit& u : units) {
    if (!shards.back().empty() && bytes + u.bytes() > maxShardBytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(&u);
    bytes += u.bytes();
  }
  return shards;
}

// A dense input tensor [n, k] as f32, read row block by row block (no copy of the whole tensor in
// its stored type).
std::vector<float> readAsFloat(const WeightStore& store, const TensorInfo& info) {
  const int64_t n = info.shape.at(0), k = info.shape.at(1);
  const int64_t elem = dtype_size(info.dtype);
  std::vector<float> w(static_cast<size_t>(n * k));
  const int64_t rowsPerRead =
      std::max<int64_t>(1, static_cast<int64_t>(kCopyChunkBytes) / (k * elem));
  std::vector<uint8_t> raw;
  for (int64_t r0 = 0; r0 < n; r0 += rowsPerRead) {
    const int64_t rows = std::min(rowsPerRead, n - r0);
    raw.resize(static_cast<size_t>(rows * k * elem));
    store.readBytes(info.name, static_cast<uint64_t>(r0 * k * elem), raw.data(), raw.size());
    for (int64_t i = 0; i < rows * k; ++i) w[r0 * k + i] = loadAsFloat(raw.data(), info.dtype, i);
  }
  return w;
}

template <typename T>
std::span<const uint8_t> asBytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Appends the unit's output tensors, in the order of its entries.
void writeUnit(const WeightStore& store, const Unit& u, const QuantizeOptions& options,
               SafetensorsWriter& writer) {
  const TensorInfo& info = store.info(u.source);
  if (!u.quantize) {
    std::vector<uint8_t> chunk;
    for (uint64_t offset = 0; offset < info.byteSize(); offset += kCopyChunkBytes) {
      chunk.resize(std::min(kCopyChunkBytes, info.byteSize() - offset));
      store.readBytes(u.source, offset, chunk.data(), chunk.size());
      writer.append(chunk);
    }
    return;
  }
  const int64_t n = info.shape.at(0), k = info.shape.at(1);
  const std::string where = u.source + " in " + store.source();
  if (options.to == QuantizeTo::kInt4) {
    const AwqGemmTensors t =
        packAwqGemm(quantizeInt4(readAsFloat(store, info), n, k, options.group, where));
    writer.append(asBytes(t.qweight));
    writer.append(asBytes(t.qzeros));
    writer.append(asBytes(t.scales));
  } else {
    const HostQuantizedMatrix m = quantizeFp8Blocks(readAsFloat(store, info), n, k, where);
    writer.append(m.data);
    writer.append(asBytes(fp8BlockScaleInv(m)));
  }
}

std::string shardName(size_t i, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, count);
  return buf;
}

void writeText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) ES_THROW(InvalidArgument, "quantize: cannot write ", path.string());
}

// Removes the files a failed run wrote, unless dismissed once the run succeeded.
class WrittenFiles {
 public:
  ~WrittenFiles() {
    if (done_) return;
    std::error_code ec;
    for (const fs::path& p : paths_) fs::remove(p, ec);
  }
  void add(fs::path p) { paths_.push_back(std::move(p)); }
  void keep() { done_ = true; }

 private:
  std::vector<fs::path> paths_;
  bool done_ = false;
};

}  // namespace

std::vector<std::string> quantizedLinearNames(const ModelConfig& config) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = layerPrefix(config, i);
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      names.push_back(prefix + m + ".weight");
    }
  }
  return names;
}

QuantizeReport quantizeFolder(const fs::path& in, const fs::path& out,
                              const QuantizeOptions& options) {
  checkOptions(options);
  checkInput(in);
  const fs::path configPath = in / "config.json";
  const std::string configText = readInputFile(configPath, kMaxConfigJsonBytes, "quantize");
  const nlohmann::json configJson = parseJsonStrict(configText, configPath.string());
  checkNotQuantized(configJson, configPath);
  QuantizeReport report;
  report.config = parseModelConfig(configText, configPath.string());
  const WeightStore store = WeightStore::openFolder(in);
  checkWeights(store, report.config);
  checkOutput(in, out, options.force);
  const std::vector<Unit> units = planUnits(store, report.config, options);
  const auto shards = shardUnits(units, options.maxShardBytes);
  const std::string outConfig = outputConfig(configText, options);

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    ES_THROW(InvalidArgument, "quantize: OUT_FOLDER ", out.string(),
             " cannot be created: ", ec ? ec.message() : "not a directory");
  }
  if (options.force) {
    for (const fs::directory_entry& e : fs::directory_iterator(out)) {
      if (isWeightFile(e.path().filename().string())) fs::remove(e.path());
    }
  }

  WrittenFiles written;
  nlohmann::json weightMap = nlohmann::json::object();
  size_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? kSingleWeightsFile : shardName(s, shards.size());
    std::vector<SafetensorsEntry> entries;
    for (const Unit* u : shards[s]) {
      for (const SafetensorsEntry& e : u->outputs) {
        entries.push_back(e);
        weightMap[e.name] = file;
        report.bytesOut += e.bytes;
        ++report.tensorsOut;
      }
    }
    SafetensorsWriter writer(out / file, entries, {{"format", "pt"}}, "quantize");
    written.add(out / file);
    for (const Unit* u : shards[s]) {
      writeUnit(store, *u, options, writer);
      report.quantized += u->quantize ? 1 : 0;
      if (options.progress) {
        options.progress({.task = "quantize",
                          .unit = "tensors",
                          .done = static_cast<int64_t>(++done),
                          .total = static_cast<int64_t>(units.size())});
      }
    }
    writer.finish();
  }
  report.shards = shards.size();
  report.tensorsIn = units.size();
  report.bytesIn = store.totalTensorBytes();
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", report.bytesOut}}},
                                  {"weight_map", weightMap}};
    written.add(out / kWeightsIndexFile);
    writeText(out / kWeightsIndexFile, index.dump(2) + "\n");
  }

  std::set<std::string, std::less<>> inputWeightFiles;  // shards of any name an index lists
  for (size_t i = 0; i < store.numFiles(); ++i)
    inputWeightFiles.insert(store.file(i).path().filename().string());
  for (const fs::directory_entry& e : fs::directory_iterator(in)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || isWeightFile(name) || inputWeightFiles.count(name) != 0 ||
        !e.is_regular_file())
      continue;
    written.add(out / name);
    fs::copy_file(e.path(), out / name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      ES_THROW(InvalidArgument, "quantize: cannot copy ", e.path().string(), " to ", out.string(),
               ": ", ec.message());
    }
    ++report.copiedFiles;
  }
  written.add(out / "config.json");
  writeText(out / "config.json", outConfig);
  written.keep();
  return report;
}

}  // namespace es::model
