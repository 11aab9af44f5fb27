// libFuzzer target for the GGUF reader (built by tools/fuzz.sh gguf, not by CMake). The input is
// a whole file. A FormatError is the expected way to reject it; any other exception, a
// sanitizer report or a broken invariant of an accepted header is a finding. Accepted files also
// go through the typed getters, the vocabulary reader and the dequantiser of small tensors.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf.h"
#include "model/gguf_dequant.h"
#include "model/gguf_tokenizer.h"

using namespace es::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  // GgufFile::open parses a prefix that grows on demand: it must agree with the whole buffer,
  // error messages included.
  const GgufBytesSource more = [&](uint64_t needed) {
    return file.first(static_cast<size_t>(needed));
  };
  std::string prefixError;
  uint64_t prefixDataOffset = 0;
  try {
    prefixDataOffset =
        parseGgufHeader(file.first(std::min<size_t>(size, 4)), size, more, "fuzz-input")
            .data_offset;
  } catch (const es::FormatError& e) {
    prefixError = e.what();
  }
  GgufHeader h;
  try {
    h = parseGgufHeader(file, "fuzz-input");
  } catch (const es::FormatError& e) {
    if (prefixError != e.what()) __builtin_trap();
    return 0;
  }
  if (!prefixError.empty() || prefixDataOffset != h.data_offset) __builtin_trap();
  if (h.data_offset + h.data_bytes != size) __builtin_trap();
  if (h.alignment == 0 || (h.alignment & (h.alignment - 1)) != 0) __builtin_trap();
  for (const GgufTensorInfo& t : h.tensors) {
    if (h.findTensor(t.name) != &t) __builtin_trap();
    if (t.offset % h.alignment != 0 || t.offset > h.data_bytes || t.bytes > h.data_bytes - t.offset)
      __builtin_trap();
    if (t.dims.empty() || t.dims.size() > static_cast<size_t>(kGgufMaxDims)) __builtin_trap();
    if (t.bytes > 0) {
      // Touch the first and last byte through the arithmetic GgufFile::bytes uses.
      volatile uint8_t first = data[h.data_offset + t.offset];
      volatile uint8_t last = data[h.data_offset + t.offset + t.bytes - 1];
      (void)first;
      (void)last;
    }
    if (ggmlTypeDequantizable(t.type) && t.numel <= 4096) {
      std::vector<float> out(static_cast<size_t>(t.numel));
      try {
        dequantizeToF32(t.type, file.subspan(h.data_offset + t.offset, t.bytes), out, t.name);
      } catch (const es::FormatError&) {
        __builtin_trap();  // sizes were validated at parse: dequantisation must accept them
      }
    }
  }
  for (const auto& [key, value] : h.metadata) {
    try {
      if (value.type == GgufValueType::kString) h.getString(key);
      if (value.isInteger()) h.getInt(key, INT64_MIN, INT64_MAX);
      if (value.isFloat()) h.getFloat(key);
      if (value.type == GgufValueType::kArray && value.element_type == GgufValueType::kString)
        h.getStringArray(key);
      if (value.type == GgufValueType::kArray) h.getIntArray(key);
    } catch (const es::FormatError&) {
    }
  }
  try {
    tokenizerSpecFromGguf(h);
    hfTokenizerJson(h).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const es::FormatError&) {
  }
  return 0;
}
