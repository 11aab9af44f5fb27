#pragma once
// Hardened reader of the safetensors format (https://github.com/huggingface/safetensors):
//   [8 bytes: N, little-endian u64] [N bytes: JSON header] [data section]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" object of strings.
//
// Every malformed input is an es::FormatError naming the file, the tensor or field, the value
// and the limit; nothing is read outside the given bytes. parseSafetensorsHeader works on a
// memory buffer (the fuzz target calls it directly); SafetensorsFile maps a file read-only and
// hands out host TensorViews over the mapped bytes (zero copy: the page cache backs them).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/tensor_view.h"

namespace es::model {

// Largest JSON header accepted; the reference implementation uses the same bound.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // rank <= kMaxTensorRank, every dim >= 0
  uint64_t begin = 0;          // byte offsets relative to the data section, begin <= end
  uint64_t end = 0;

  uint64_t byteSize() const { return end - begin; }
  int64_t numel() const;
  std::string describe() const;  // e.g. "model.norm.weight bf16[64]"
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;                    // N, the JSON length
  uint64_t data_offset = 0;                     // 8 + N: where the data section starts in the file
  uint64_t data_bytes = 0;                      // file size - data_offset
  std::vector<TensorInfo> tensors;              // sorted by name, names unique
  std::map<std::string, std::string> metadata;  // "__metadata__"; non-string values as JSON

  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
};

// Parses and validates the header of a complete safetensors file held in `file` (all of it: the
// offsets are checked against its size). `source` names the file in error messages.
// Throws FormatError on any malformed input.
SafetensorsHeader parseSafetensorsHeader(std::span<const uint8_t> file,
                                         std::string_view source = "<memory>");
// The same from the first bytes of a file of `fileBytes` bytes: `prefix` holds at least the
// length field and the header (8 + N bytes) when those are inside the file (the whole file when
// it is shorter than 8 bytes). InvalidArgument when it holds less.
SafetensorsHeader parseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                                         std::string_view source);

// Maps safetensors dtype names to DType: "BF16", "F16", "F32" (dense weights), "F8_E4M3" (FP8
// checkpoint weights) and "I32" (packed 4-bit AWQ / GPTQ tensors, GPTQ's g_idx); false for
// anything else. Which dtype a tensor may have is the loaders' business (weight_names.h,
// quantized_checkpoint.h).
bool safetensorsDTypeFromName(std::string_view name, DType* out);
// The other way: the name of each of those dtypes; empty for the rest.
std::string_view safetensorsDTypeName(DType dtype);

// A read-only memory-mapped safetensors file. Move-only; unmaps on destruction. Views stay
// valid while the object lives. The mapping is PROT_READ: writing through a view faults.
// As with any mmap, reading a view of a file that was truncated on disk after it was mapped
// raises SIGBUS; open() therefore parses a pread copy of the header, and the loaders copy tensor
// data with readBytes (pread), which turns a truncated file into a FormatError naming the file
// and the offset.
class SafetensorsFile {
 public:
  // Throws InvalidArgument if the path is not a readable regular file, FormatError if the
  // content is malformed.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  uint64_t fileBytes() const { return map_.size(); }

  bool contains(std::string_view name) const { return header_.find(name) != nullptr; }
  // Throws InvalidArgument naming the tensor and the file when absent.
  const TensorInfo& info(std::string_view name) const;
  // Host view over the mapped bytes. Pointers are aligned to the element size when the writer
  // padded the header (the reference writer pads to 8); see isAligned.
  TensorView view(std::string_view name) const;
  std::span<const uint8_t> bytes(std::string_view name) const;
  bool isAligned(std::string_view name) const;
  // Copies bytes [offset, offset + count) of tensor `name` into `dst` with pread (not through the
  // mapping). InvalidArgument if the range is outside the tensor; FormatError naming the file
  // and the offset if the file has been truncated since it was opened.
  void readBytes(std::string_view name, uint64_t offset, void* dst, uint64_t count) const;

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  MappedFile map_;  // the whole file, read-only
  SafetensorsHeader header_;
};

}  // namespace es::model
