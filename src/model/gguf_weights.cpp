#include "model/gguf_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "common/errors.h"
#include "common/input_file.h"
#include "model/gguf_convert.h"
#include "model/gguf_dequant.h"
#include "model/weight_names.h"

namespace es::model {
namespace {

std::string joinFirst(const std::vector<std::string>& items, size_t max = 8) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > max) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

}  // namespace

bool isGgufPath(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return false;
  // By name even when missing or unreadable: GgufFile::open then says what is wrong with it.
  if (path.extension() == ".gguf") return true;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    const InputFile file = InputFile::open(path, "isGgufPath");
    char magic[4] = {};
    if (file.size() < sizeof magic) return false;
    file.readAt(0, magic, sizeof magic);
    return std::memcmp(magic, "GGUF", 4) == 0;
  } catch (const Error&) {
    return false;  // not a readable regular file: the caller's open names the problem
  }
}

std::unique_ptr<const GgufWeights> GgufWeights::open(const std::filesystem::path& path,
                                                     DType dtype) {
  ES_CHECK_ARG(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
               "GgufWeights::open", "dtype", dtype_name(dtype), "must be f32, bf16 or f16");
  return std::unique_ptr<const GgufWeights>(new GgufWeights(GgufFile::open(path), dtype));
}

GgufWeights::GgufWeights(GgufFile file, DType dtype)
    : file_(std::move(file)), dtype_(dtype), config_(ggufModelConfig(file_.header())) {
  const GgufHeader& h = file_.header();
  const ModelConfig& c = config_;
  std::map<std::string, const ExpectedTensor*, std::less<>> expected_by_name;
  const std::vector<ExpectedTensor> expected = expectedTensors(c);
  for (const ExpectedTensor& e : expected) expected_by_name[e.name] = &e;
  std::vector<std::string> unknown, unsupported, misshapen, missing;
  std::map<std::string, bool, std::less<>> seen;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const GgufTensorInfo& t = h.tensors[i];
    Entry entry;
    entry.gguf_index = i;
    entry.info.name = hfTensorName(t.name);
    const auto e = expected_by_name.find(entry.info.name);
    if (entry.info.name.empty() || e == expected_by_name.end()) {
      unknown.push_back(escapeControl(t.name));
      continue;
    }
    if (!ggmlTypeDequantizable(t.type))
      unsupported.push_back(escapeControl(t.name) + " (" + ggmlTypeName(t.type) + ")");
    entry.info.shape = t.rowMajorShape();
    if (entry.info.shape != e->second->shape) {
      misshapen.push_back(t.describe() + " for " + entry.info.name + " " +
                          shapeText(e->second->shape));
    }
    entry.info.dtype = dtype;
    entry.info.end = t.numel * static_cast<uint64_t>(dtype_size(dtype));
    if (c.architecture == Architecture::kLlama) {
      // llama.cpp's converter permutes these two for interleaved RoPE (spec §5).
      if (entry.info.name.ends_with("self_attn.q_proj.weight"))
        entry.permute_heads = c.num_attention_heads;
      if (entry.info.name.ends_with("self_attn.k_proj.weight"))
        entry.permute_heads = c.num_key_value_heads;
    }
    seen[entry.info.name] = true;
    entries_.push_back(std::move(entry));
  }
  for (const ExpectedTensor& e : expected) {
    if (e.required && seen.count(e.name) == 0) missing.push_back(e.name);
  }
  if (!unknown.empty() || !unsupported.empty() || !misshapen.empty() || !missing.empty()) {
    std::ostringstream os;
    os << h.source << ": cannot load as " << architectureName(c.architecture) << ":";
    if (!unknown.empty()) os << " unknown tensors: " << joinFirst(unknown) << ";";
    if (!unsupported.empty())
      os << " tensor types that cannot be dequantised: " << joinFirst(unsupported) << ";";
    if (!misshapen.empty()) os << " misshapen: " << joinFirst(misshapen) << ";";
    if (!missing.empty()) os << " missing: " << joinFirst(missing) << ";";
    throw FormatError(os.str());
  }
}

void GgufWeights::read(const Entry& e, std::span<uint8_t> out) const {
  const GgufTensorInfo& t = ggufTensor(e);
  ES_CHECK_ARG(out.size() == e.info.byteSize(), "GgufWeights::read", "out.size()", out.size(),
               "must be the tensor's ", e.info.byteSize(), " bytes (", e.info.name, ")");
  ES_CHECK_ARG(
      reinterpret_cast<uintptr_t>(out.data()) % static_cast<uintptr_t>(dtype_size(dtype_)) == 0,
      "GgufWeights::read", "out.data()", static_cast<const void*>(out.data()),
      "must be aligned to ", dtype_size(dtype_), " bytes");
  if (t.numel == 0) return;
  const GgmlTypeTraits traits = *ggmlTypeTraits(t.type);  // known: the parser accepted it
  // A ggml row (dims[0] elements, whole blocks: checked by the parser) is an HF row.
  const int64_t cols = static_cast<int64_t>(t.dims[0]);
  const int64_t rows = static_cast<int64_t>(t.numel) / cols;
  const uint64_t row_bytes = static_cast<uint64_t>(cols) / traits.block_elems * traits.block_bytes;
  // The stored bytes, read with pread rather than through the mapping (GgufFile::readBytes).
  std::vector<uint8_t> stored(static_cast<size_t>(t.bytes));
  file_.readBytes(t, stored);
  const std::span<const uint8_t> src(stored);
  const std::string what = file_.path().string() + ": tensor " + quoteShort(t.name);
  const int64_t head_dim = e.permute_heads > 0 ? rows / e.permute_heads : 0;
  if (e.permute_heads > 0) {
    ES_CHECK_ARG(rows % e.permute_heads == 0 && head_dim % 2 == 0, "GgufWeights::read",
                 "permute_heads", e.permute_heads, "must split ", rows,
                 " rows into heads of even size (", e.info.name, ")");
  }
  // Rows [first, first + n) of the HF tensor, dequantised into `dst` (n * cols floats). Without
  // a permutation they are contiguous in the file; with one, each is found on its own.
  auto dequantRows = [&](int64_t first, int64_t n, float* dst) {
    if (e.permute_heads == 0) {
      dequantizeToF32(
          t.type,
          src.subspan(static_cast<size_t>(first * row_bytes), static_cast<size_t>(n * row_bytes)),
          std::span<float>(dst, static_cast<size_t>(n * cols)), what);
      return;
    }
    for (int64_t r = first; r < first + n; ++r) {
      const int64_t stored = llamaStoredRow(r, head_dim);
      dequantizeToF32(
          t.type,
          src.subspan(static_cast<size_t>(stored * row_bytes), static_cast<size_t>(row_bytes)),
          std::span<float>(dst + (r - first) * cols, static_cast<size_t>(cols)), what);
    }
  };
  if (dtype_ == DType::kF32) {  // straight into the output
    dequantRows(0, rows, reinterpret_cast<float*>(out.data()));
    return;
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kGgufReadChunkElems / cols);
  std::vector<float> scratch(static_cast<size_t>(std::min(rows, chunk_rows) * cols));
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - first);
    const std::span<const float> part(scratch.data(), static_cast<size_t>(n * cols));
    dequantRows(first, n, scratch.data());
    const size_t offset = static_cast<size_t>(first * cols);
    if (dtype_ == DType::kBF16) {
      convertF32(part, std::span<bf16>(reinterpret_cast<bf16*>(out.data()) + offset, part.size()));
    } else {
      convertF32(part, std::span<fp16>(reinterpret_cast<fp16*>(out.data()) + offset, part.size()));
    }
  }
}

std::optional<QuantFormat> GgufWeights::quantFormat(const Entry& e) const {
  const std::string& name = e.info.name;
  if (!name.ends_with("_proj.weight") && name != "lm_head.weight") return std::nullopt;
  return quantFormatOfGgmlType(ggufTensor(e).type);
}

HostQuantizedMatrix GgufWeights::readQuantized(const Entry& e) const {
  const GgufTensorInfo& t = ggufTensor(e);
  const std::optional<QuantFormat> format = quantFormat(e);
  ES_CHECK_ARG(format.has_value(), "GgufWeights::readQuantized", "name", e.info.name,
               "is not a quantized linear weight (", ggmlTypeName(t.type), ") of ",
               file_.path().string(), "; use read()");
  // A ggml row (dims[0] elements, whole blocks: checked by the parser) is an HF row.
  const int64_t cols = static_cast<int64_t>(t.dims[0]);
  const int64_t rows = static_cast<int64_t>(t.numel) / cols;
  const int32_t group = ggufBlockElems(*format);
  const int64_t rowBytes = dataRowBytes(*format, cols, group);
  HostQuantizedMatrix m{.format = *format, .group = group, .n = rows, .k = cols};
  m.data.resize(static_cast<size_t>(t.bytes));
  ES_CHECK_ARG(static_cast<int64_t>(t.bytes) == rows * rowBytes, "GgufWeights::readQuantized",
               "name", e.info.name, "holds ", t.bytes, " bytes, not ", rows, " rows of ", rowBytes);
  file_.readBytes(t, m.data);
  if (e.permute_heads == 0) return m;
  const int64_t headDim = rows / e.permute_heads;
  ES_CHECK_ARG(rows % e.permute_heads == 0 && headDim % 2 == 0, "GgufWeights::readQuantized",
               "permute_heads", e.permute_heads, "must split ", rows,
               " rows into heads of even size (", e.info.name, ")");
  std::vector<uint8_t> stored = std::move(m.data);
  m.data.resize(stored.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(m.data.data() + r * rowBytes, stored.data() + llamaStoredRow(r, headDim) * rowBytes,
                static_cast<size_t>(rowBytes));
  }
  return m;
}

}  // namespace es::model
