#include "model/linear_weight.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/dtype_convert.h"
#include "common/errors.h"
#include "common/quant_dequant.h"
#include "model/weight_names.h"
#include "model/weight_upload.h"

namespace es::model {
namespace {

// Uploads `bytes` host bytes into a new backend buffer (empty for none).
Buffer uploadBytes(ops::Backend& backend, const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) return Buffer();
  Buffer b = backend.allocate(static_cast<int64_t>(bytes.size()));
  backend.copyFromHost(b.data(), bytes.data(), static_cast<int64_t>(bytes.size()));
  return b;
}

// The quantized rows of `name`, checked against the tensor's shape and the format's layout:
// FormatError naming the store, the tensor and what is wrong (a reader's output is file data).
HostQuantizedMatrix readChecked(const WeightStore& store, const std::string& name) {
  HostQuantizedMatrix m = store.readQuantized(name);
  const std::array<int64_t, 2> nk = store.matrixShape(name);
  const std::string what = store.source() + ": tensor " + quoteShort(name) + " (" +
                           std::string(quantFormatName(m.format)) + ")";
  if (m.n != nk[0] || m.k != nk[1]) {
    ES_THROW(FormatError, what, ": quantized as [", m.n, ", ", m.k, "] but its shape is [", nk[0],
             ", ", nk[1], "]");
  }
  if (const char* why = quantLayoutRejection(m.format, m.k, m.group)) {
    ES_THROW(FormatError, what, ": group ", m.group, " with k = ", m.k, ": ", why);
  }
  const int64_t want[3] = {m.n * dataRowBytes(m.format, m.k, m.group),
                           m.n * scaleRowBytes(m.format, m.k, m.group),
                           m.n * zeroRowBytes(m.format, m.k, m.group)};
  const size_t got[3] = {m.data.size(), m.scales.size(), m.zeros.size()};
  const char* array[3] = {"data", "scales", "zeros"};
  for (int i = 0; i < 3; ++i) {
    if (static_cast<int64_t>(got[i]) != want[i]) {
      ES_THROW(FormatError, what, ": ", array[i], " holds ", got[i], " bytes, not ", want[i]);
    }
  }
  return m;
}

// The quantized tensor `name` dequantized to `dtype` into backend memory at `dst`, a chunk of
// rows (at most kUploadChunkBytes of f32) at a time.
void uploadDequantized(ops::Backend& backend, const WeightStore& store, const std::string& name,
                       DType dtype, void* dst) {
  const HostQuantizedMatrix q = readChecked(store, name);
  const int64_t es = dtype_size(dtype);
  const int64_t chunkRows = std::max<int64_t>(1, kUploadChunkBytes / (q.k * 4));
  std::vector<float> row(static_cast<size_t>(q.k));
  std::vector<uint8_t> staging(static_cast<size_t>(std::min(chunkRows, q.n) * q.k * es));
  for (int64_t first = 0; first < q.n; first += chunkRows) {
    const int64_t rows = std::min(chunkRows, q.n - first);
    for (int64_t r = 0; r < rows; ++r) {
      dequantizeRow(q.view(), q.k, first + r, row);
      storeFloats(row.data(), dtype, r * q.k, q.k, staging.data());
    }
    backend.copyFromHost(static_cast<uint8_t*>(dst) + first * q.k * es, staging.data(),
                         rows * q.k * es);
  }
}

// The format every tensor of `names` is quantized in, or nullopt when one is dense or they
// differ.
std::optional<QuantFormat> sharedQuantFormat(const WeightStore& store,
                                             const std::vector<std::string>& names) {
  std::optional<QuantFormat> format;
  for (const std::string& name : names) {
    const std::optional<QuantFormat> f = store.quantFormat(name);
    if (!f || (format && *f != *format)) return std::nullopt;
    format = f;
  }
  return format;
}

}  // namespace

bool LinearWeight::quantized() const {
  return format.has_value() || std::any_of(parts.begin(), parts.end(),
                                           [](const LinearWeight& w) { return w.quantized(); });
}

int64_t LinearWeight::bytes() const {
  int64_t total = dense.bytes() + data.bytes() + scales.bytes() + zeros.bytes();
  for (const LinearWeight& part : parts) total += part.bytes();
  return total;
}

std::string LinearWeight::formatName() const {
  if (!parts.empty()) {
    std::string names;
    for (const LinearWeight& part : parts) names += (names.empty() ? "" : "|") + part.formatName();
    return names;
  }
  return format ? std::string(quantFormatName(*format)) : std::string(dtype_name(dtype));
}

void LinearWeight::fill(kernel::LinearParams& p, int64_t firstRow) const {
  if (!parts.empty()) {
    int64_t start = 0;
    for (const LinearWeight& part : parts) {
      if (firstRow >= start && firstRow + p.n <= start + part.n) {
        part.fill(p, firstRow - start);
        return;
      }
      start += part.n;
    }
    ES_CHECK_ARG(false, "LinearWeight::fill", "rows", firstRow, "to ", firstRow + p.n,
                 " must lie in one part of the W split ", formatName());
  }
  if (format) {
    auto at = [&](const Buffer& b, int64_t rowBytes) -> const void* {
      return b.bytes() ? b.as<uint8_t>() + firstRow * rowBytes : nullptr;
    };
    p.w = nullptr;
    p.weightDtype = std::nullopt;
    p.quantized = QuantizedWeightView{.format = *format,
                                      .data = at(data, dataRowBytes(*format, k, group)),
                                      .scales = at(scales, scaleRowBytes(*format, k, group)),
                                      .zeros = at(zeros, zeroRowBytes(*format, k, group)),
                                      .group = group};
    return;
  }
  const auto* base = static_cast<const uint8_t*>(dense.bytes() ? dense.data() : shared);
  p.w = base + firstRow * k * dtype_size(dtype);
  p.weightDtype = dtype != p.dtype ? std::optional<DType>(dtype) : std::nullopt;
  p.quantized = std::nullopt;
}

LinearWeight sharedLinear(const void* w, int64_t n, int64_t k, DType dtype) {
  LinearWeight out{.n = n, .k = k, .dtype = dtype};
  out.shared = w;
  return out;
}

void runLinear(ops::Backend& backend, const LinearWeight& w, kernel::LinearParams p,
               void* scratch) {
  if (w.parts.empty()) {
    w.fill(p);
    backend.linear(p);
    return;
  }
  ES_CHECK_ARG(!p.accumulate, "runLinear", "accumulate", p.accumulate,
               "is not supported for a W in parts (", w.formatName(), ")");
  ES_CHECK_ARG(scratch != nullptr, "runLinear", "scratch", "null",
               "must hold a part's output for a W in parts (", w.formatName(), ")");
  const int64_t ys = dtype_size(p.outDtype), bs = dtype_size(p.dtype);
  int64_t start = 0;
  for (const LinearWeight& part : w.parts) {
    kernel::LinearParams q = p;
    q.n = static_cast<int32_t>(part.n);
    q.y = scratch;
    q.bias = p.bias ? static_cast<const uint8_t*>(p.bias) + start * bs : nullptr;
    part.fill(q);
    backend.linear(q);
    backend.copy2D(static_cast<uint8_t*>(p.y) + start * ys, p.n * ys, scratch, part.n * ys,
                   part.n * ys, p.m);
    start += part.n;
  }
}

LinearWeight loadLinear(ops::Backend& backend, const WeightStore& store,
                        const std::vector<std::string>& names, DType dtype, bool allowParts) {
  ES_CHECK_ARG(!names.empty(), "loadLinear", "names", "empty", "must name a tensor");
  LinearWeight w{.k = store.matrixShape(names.front())[1], .dtype = dtype};
  for (const std::string& name : names) {
    const std::array<int64_t, 2> nk = store.matrixShape(name);
    ES_CHECK_ARG(nk[1] == w.k, "loadLinear", "name", name, "must be a matrix of ", w.k,
                 " columns (", store.source(), ")");
    w.n += nk[0];
  }
  const std::optional<QuantFormat> format = sharedQuantFormat(store, names);
  if (allowParts && !format && names.size() > 1) {
    // Runs of consecutive names of one format, each loaded on its own; parts only where one of
    // them stays quantized (else one dense matrix serves as well).
    std::vector<std::vector<std::string>> runs;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i == 0 || store.quantFormat(names[i]) != store.quantFormat(names[i - 1])) {
        runs.emplace_back();
      }
      runs.back().push_back(names[i]);
    }
    const bool anyKept = std::any_of(names.begin(), names.end(), [&](const std::string& name) {
      const std::optional<QuantFormat> f = store.quantFormat(name);
      return f && backend.runsQuantized(*f);
    });
    if (anyKept) {
      for (const std::vector<std::string>& run : runs) {
        w.parts.push_back(loadLinear(backend, store, run, dtype));
      }
      return w;
    }
  }
  if (format && backend.runsQuantized(*format)) {
    // One matrix where every tensor has the same group (a checkpoint may differ per tensor: then
    // it loads dense like a mix of formats).
    HostQuantizedMatrix all{.format = *format};
    bool sameGroup = true;
    for (const std::string& name : names) {
      HostQuantizedMatrix part = readChecked(store, name);
      if (all.n == 0) all.group = part.group;
      if (part.group != all.group) {
        sameGroup = false;
        break;
      }
      all.n += part.n;
      all.data.insert(all.data.end(), part.data.begin(), part.data.end());
      all.scales.insert(all.scales.end(), part.scales.begin(), part.scales.end());
      all.zeros.insert(all.zeros.end(), part.zeros.begin(), part.zeros.end());
    }
    if (sameGroup) {
      w.format = all.format;
      w.group = all.group;
      w.data = uploadBytes(backend, all.data);
      w.scales = uploadBytes(backend, all.scales);
      w.zeros = uploadBytes(backend, all.zeros);
      return w;
    }
  }
  // Dense: every tensor converted (or dequantized) to dtype, one after another.
  const int64_t es = dtype_size(dtype);
  w.dense = backend.allocate(w.n * w.k * es);
  int64_t row = 0;
  for (const std::string& name : names) {
    void* dst = w.dense.as<uint8_t>() + row * w.k * es;
    if (store.quantFormat(name)) {
      uploadDequantized(backend, store, name, dtype, dst);
    } else {
      uploadTensor(backend, store, name, dtype, dst);
    }
    row += store.matrixShape(name)[0];
  }
  return w;
}

void interleaveGateUp(ops::Backend& backend, LinearWeight& w, int64_t features) {
  ES_CHECK_ARG(w.n == 2 * features, "interleaveGateUp", "w.n", w.n,
               "must be 2 * features = ", 2 * features);
  ES_CHECK_ARG(w.parts.empty(), "interleaveGateUp", "w", w.formatName(),
               "must be one matrix, not parts");
  if (!w.format) {
    ES_CHECK_ARG(w.dense.bytes() > 0, "interleaveGateUp", "w.dense", "empty",
                 "must hold the weight (a shared table cannot be reordered)");
    w.dense = interleaveGateUp(backend, w.dense, features, w.k * dtype_size(w.dtype));
    return;
  }
  auto reorder = [&](Buffer& b, int64_t rowBytes) {
    if (b.bytes()) b = interleaveGateUp(backend, b, features, rowBytes);
  };
  reorder(w.data, dataRowBytes(*w.format, w.k, w.group));
  reorder(w.scales, scaleRowBytes(*w.format, w.k, w.group));
  reorder(w.zeros, zeroRowBytes(*w.format, w.k, w.group));
}

}  // namespace es::model
