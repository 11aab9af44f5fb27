#include "model/weight_upload.h"

#include <algorithm>
#include <cstring>

#include "common/dtype_convert.h"
#include "common/errors.h"

namespace es::model {

void uploadTensor(ops::Backend& backend, const WeightStore& store, std::string_view name,
                  DType dtype, void* dst) {
  const TensorInfo& info = store.info(name);
  // A view of the mapping, or (GGUF store) the tensor dequantised into host memory.
  const HostTensor src = store.read(name);
  const auto* bytes = static_cast<const uint8_t*>(src.view.data);
  const int64_t numel = info.numel();
  auto* out = static_cast<uint8_t*>(dst);
  if (info.dtype == dtype) {  // no conversion: stream straight from the mapping
    const int64_t total = numel * dtype_size(dtype);
    for (int64_t off = 0; off < total; off += kUploadChunkBytes) {
      backend.copyFromHost(out + off, bytes + off, std::min(kUploadChunkBytes, total - off));
    }
    return;
  }
  const int64_t chunkElems = kUploadChunkBytes / 4;
  std::vector<uint8_t> staging(static_cast<size_t>(std::min(numel, chunkElems) * dtype_size(dtype)));
  for (int64_t first = 0; first < numel; first += chunkElems) {
    const int64_t n = std::min(chunkElems, numel - first);
    for (int64_t i = 0; i < n; ++i) {
      storeFromFloat(staging.data(), dtype, i, loadAsFloat(bytes, info.dtype, first + i));
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

}  // namespace es::model
