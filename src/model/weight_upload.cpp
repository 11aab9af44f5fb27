#include "model/weight_upload.h"

#include <algorithm>
#include <cstring>

#include "common/dtype_convert.h"
#include "common/errors.h"

namespace es::model {

void uploadTensor(ops::Backend& backend, const WeightStore& store, std::string_view name,
                  DType dtype, void* dst) {
  const TensorInfo& info = store.info(name);
  const int64_t numel = info.numel();
  auto* out = static_cast<uint8_t*>(dst);
  if (store.isGguf()) {  // dequantised into host memory by read(), already in `dtype`
    const HostTensor src = store.read(name);
    const int64_t total = numel * dtype_size(dtype);
    for (int64_t off = 0; off < total; off += kUploadChunkBytes) {
      backend.copyFromHost(out + off, src.storage.data() + off,
                           std::min(kUploadChunkBytes, total - off));
    }
    return;
  }
  // Safetensors: the bytes come with pread (WeightStore::readBytes), never through the mapping,
  // so a file truncated while it loads is an error naming the file instead of a SIGBUS.
  if (info.dtype == dtype) {
    const int64_t total = numel * dtype_size(dtype);
    if (backend.space() == MemorySpace::kHost) {  // straight into the destination
      store.readBytes(name, 0, out, static_cast<uint64_t>(total));
      return;
    }
    std::vector<uint8_t> staging(static_cast<size_t>(std::min(kUploadChunkBytes, total)));
    for (int64_t off = 0; off < total; off += kUploadChunkBytes) {
      const int64_t n = std::min(kUploadChunkBytes, total - off);
      store.readBytes(name, static_cast<uint64_t>(off), staging.data(), static_cast<uint64_t>(n));
      backend.copyFromHost(out + off, staging.data(), n);
    }
    return;
  }
  const int64_t chunkElems = kUploadChunkBytes / 4;
  const int64_t srcSize = dtype_size(info.dtype);
  std::vector<uint8_t> source(static_cast<size_t>(std::min(numel, chunkElems) * srcSize));
  std::vector<uint8_t> staging(
      static_cast<size_t>(std::min(numel, chunkElems) * dtype_size(dtype)));
  for (int64_t first = 0; first < numel; first += chunkElems) {
    const int64_t n = std::min(chunkElems, numel - first);
    store.readBytes(name, static_cast<uint64_t>(first * srcSize), source.data(),
                    static_cast<uint64_t>(n * srcSize));
    for (int64_t i = 0; i < n; ++i) {
      storeFromFloat(staging.data(), dtype, i, loadAsFloat(source.data(), info.dtype, i));
    }
    backend.copyFromHost(out + first * dtype_size(dtype), staging.data(), n * dtype_size(dtype));
  }
}

Buffer uploadConcatenated(ops::Backend& backend, const WeightStore& store,
                          const std::vector<std::string>& names, DType dtype) {
  int64_t total = 0;
  for (const std::string& n : names) total += store.info(n).numel();
  Buffer buffer = backend.allocate(total * dtype_size(dtype));
  int64_t offset = 0;
  for (const std::string& n : names) {
    uploadTensor(backend, store, n, dtype, buffer.as<uint8_t>() + offset * dtype_size(dtype));
    offset += store.info(n).numel();
  }
  return buffer;
}

Buffer interleaveGateUp(ops::Backend& backend, const Buffer& halves, int64_t features,
                        int64_t rowBytes) {
  constexpr int64_t G = kernel::kGateUpGroup;
  ES_CHECK_ARG(features > 0 && features % G == 0, "interleaveGateUp", "features", features,
               "must be a positive multiple of 8");
  ES_CHECK_ARG(halves.bytes() == 2 * features * rowBytes, "interleaveGateUp", "halves.bytes()",
               halves.bytes(), "must be 2 * features * rowBytes = ", 2 * features * rowBytes);
  Buffer out = backend.allocate(halves.bytes());
  const int64_t groupBytes = G * rowBytes;
  // Gate group g -> rows [16g, 16g + 8) of out, up group g -> rows [16g + 8, 16g + 16).
  backend.copy2D(out.data(), 2 * groupBytes, halves.data(), groupBytes, groupBytes, features / G);
  backend.copy2D(out.as<uint8_t>() + groupBytes, 2 * groupBytes,
                 halves.as<uint8_t>() + features * rowBytes, groupBytes, groupBytes, features / G);
  backend.synchronize();  // the copies have read `halves` before the caller frees it
  return out;
}

}  // namespace es::model
