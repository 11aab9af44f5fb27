// Upload of the page table's dirty rows (CUDA builds only).
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "kv/page_table.h"

namespace es::kv {

std::vector<PageTableRange> PageTable::uploadDirty(int32_t* device, cudaStream_t stream) {
  ES_CHECK_ARG(device != nullptr, "PageTable::uploadDirty", "device", "null", "must be non-null");
  std::vector<PageTableRange> ranges = takeDirtyRanges();
  for (const PageTableRange& r : ranges) {
    // Pageable source: the runtime stages it before returning, so image_ may change afterwards.
    ES_CUDA_CHECK(cudaMemcpyAsync(device + r.offset, image_.data() + r.offset,
                                  static_cast<size_t>(r.count) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
  }
  return ranges;
}

}  // namespace es::kv
