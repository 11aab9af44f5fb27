// libFuzzer target for the safetensors header parser (built by tools/fuzz.sh safetensors, not by
// CMake). The input is a whole file. A FormatError is the expected way to reject it; any other
// exception, a sanitizer report or a broken invariant of an accepted header is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/errors.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  try {
    const es::model::SafetensorsHeader h = es::model::parseSafetensorsHeader(file, "fuzz-input");
    if (h.data_offset + h.data_bytes != size) __builtin_trap();
    const es::model::TensorInfo* previous = nullptr;
    for (const es::model::TensorInfo& t : h.tensors) {
      if (t.begin > t.end || t.end > h.data_bytes) __builtin_trap();
      if (previous != nullptr && !(previous->name < t.name)) __builtin_trap();  // sorted, unique
      if (h.find(t.name) != &t) __builtin_trap();
      if (t.byteSize() > 0) {
        // Touch the first and last byte through the same arithmetic the mmap views use, so
        // ASan sees any range that escapes the buffer.
        volatile uint8_t first = data[h.data_offset + t.begin];
        volatile uint8_t last = data[h.data_offset + t.end - 1];
        (void)first;
        (void)last;
      }
      if (t.numel() * es::dtype_size(t.dtype) != static_cast<int64_t>(t.byteSize()))
        __builtin_trap();
      previous = &t;
    }
  } catch (const es::FormatError&) {
  }
  return 0;
}
