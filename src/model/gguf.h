#pragma once
// Hardened reader of GGUF (llama.cpp's model format), versions 3 and 2 (identical for
// little-endian files):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value }           (metadata)
//   tensor_count x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; each tensor's offset is
//   relative to the data section. Strings are u64 length + bytes; arrays are u32 element type,
//   u64 count, elements (arrays of arrays allowed). Dims are listed fastest-varying first: a
//   ggml tensor with dims (576, 49152) is the row-major [49152, 576] of Hugging Face.
//
// As with the safetensors reader, every malformed input is an es::FormatError naming the file,
// the key or tensor, the value and the limit, and nothing is read outside the given bytes:
// counts and lengths are checked against the bytes left before anything is allocated, sizes are
// computed overflow-safe, tensors must lie inside the file and not overlap, names and keys are
// unique. parseGgufHeader works on a buffer (the fuzz target calls it); GgufFile mmaps a file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/mapped_file.h"

namespace es::model {

inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr uint64_t kGgufMaxAlignment = 1u << 20;
inline constexpr int kGgufMaxDims = 4;        // GGML_MAX_DIMS
inline constexpr int kGgufMaxArrayDepth = 8;  // arrays of arrays of ...: real files use 1
inline constexpr uint64_t kGgufMaxKeyBytes = 65536;
inline constexpr uint64_t kGgufMaxTensorNameBytes = 4096;

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view ggufValueTypeName(GgufValueType t);  // "u32", "string", "array", ...

// ggml tensor types. Only those whose block layout this reader knows are accepted in a file (the
// byte size of a tensor is checked against its shape); dequantisation supports a subset
// (gguf_dequant.h).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};
struct GgmlTypeTraits {
  std::string_view name;  // "Q4_1"
  uint64_t block_elems;   // elements per block (1 for plain types)
  uint64_t block_bytes;   // bytes per block
};
// nullopt for a type id this reader does not know.
std::optional<GgmlTypeTraits> ggmlTypeTraits(uint32_t type);
std::string ggmlTypeName(uint32_t type);  // "Q4_1", or "type 42" when unknown

// One metadata value. Scalars keep their bits in `scalar` (integers and bools zero- or
// sign-extended to 64 bits, f32 widened to f64 bits); strings in `string`. Arrays keep their
// element type and count, with the elements in the one vector that fits: numeric/bool arrays as
// raw little-endian bytes (compact: a vocabulary's token_type array is ~50k elements), strings
// in `strings`, nested arrays in `arrays`.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  uint64_t scalar = 0;
  std::string string;
  GgufValueType element_type = GgufValueType::kU8;  // arrays only
  uint64_t count = 0;                               // arrays only
  std::vector<uint8_t> raw;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;

  bool isInteger() const;  // u8 .. i64 scalar
  bool isFloat() const;    // f32 / f64 scalar
  // The integer value; false if not an integer scalar or a u64 above INT64_MAX.
  bool asInt(int64_t* out) const;
  double asDouble() const;  // f32/f64 (and integers) as double
  // Element i of an integer array as int64; false when i >= count, the elements are not
  // integers or the value does not fit.
  bool intElement(uint64_t i, int64_t* out) const;
  std::string describeType() const;  // "u32", "array[string]", ...
};

struct GgufHeader;
// Gives more of a file whose header is being parsed from its first bytes: called with the number
// of bytes the parser needs (<= the file's size), returns a prefix of the file at least that long
// (earlier spans it returned may be invalidated).
using GgufBytesSource = std::function<std::span<const uint8_t>(uint64_t needed)>;
GgufHeader parseGgufHeader(std::span<const uint8_t> file, std::string_view source);
GgufHeader parseGgufHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                           const GgufBytesSource& more, std::string_view source);

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order (fastest first), 1..kGgufMaxDims entries
  uint32_t type = 0;           // a GgmlType value with known traits
  uint64_t offset = 0;         // relative to the data section, a multiple of the alignment
  uint64_t numel = 0;
  uint64_t bytes = 0;  // numel / block_elems * block_bytes

  GgmlType ggmlType() const { return static_cast<GgmlType>(type); }
  // Row-major shape as Hugging Face / safetensors write it (dims reversed).
  std::vector<int64_t> rowMajorShape() const;
  std::string describe() const;  // "blk.0.attn_q.weight Q4_1 (576, 576)"
};

struct GgufHeader {
  std::string source;  // for messages
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // where the data section starts in the file
  uint64_t data_bytes = 0;   // file size - data_offset
  std::map<std::string, GgufValue, std::less<>> metadata;  // keys unique
  std::vector<GgufTensorInfo> tensors;                     // file order, names unique

  const GgufTensorInfo* findTensor(std::string_view name) const;  // nullptr when absent
  const GgufValue* find(std::string_view key) const;              // nullptr when absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. The required forms throw FormatError "<source>: metadata key '<key>' is
  // missing" or "... has type <t>, expected <what>"; the opt forms return nullopt when the key
  // is absent and throw on a wrong type. Integers accept any integer type (range-checked);
  // floats accept f32/f64.
  std::string getString(std::string_view key) const;
  std::optional<std::string> optString(std::string_view key) const;
  int64_t getInt(std::string_view key, int64_t lo, int64_t hi) const;
  std::optional<int64_t> optInt(std::string_view key, int64_t lo, int64_t hi) const;
  double getFloat(std::string_view key) const;
  std::optional<double> optFloat(std::string_view key) const;
  std::optional<bool> optBool(std::string_view key) const;
  // Arrays: the element type must match; numbers accept any integer element type.
  const std::vector<std::string>& getStringArray(std::string_view key) const;
  std::vector<int64_t> getIntArray(std::string_view key) const;

 private:
  const GgufValue& require(std::string_view key) const;
  friend GgufHeader parseGgufHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                                    const GgufBytesSource& more, std::string_view source);
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Parses and validates a complete GGUF file held in `file` (tensor ranges are checked against
// its size). Throws FormatError on any malformed input.
// (`source` names the file in errors, e.g. "<memory>".)
GgufHeader parseGgufHeader(std::span<const uint8_t> file, std::string_view source);

// The same for a file of `fileBytes` bytes seen through `prefix` (at least its first
// min(4, fileBytes) bytes), which `more` extends whenever the parser reads past it.
GgufHeader parseGgufHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                           const GgufBytesSource& more, std::string_view source);

// How much of a GGUF file GgufFile::open reads first for its header.
inline constexpr uint64_t kGgufFirstHeaderRead = uint64_t{1} << 20;

// A read-only memory-mapped GGUF file; move-only, unmaps on destruction. The header is parsed
// from a pread copy of the file's first bytes and tensor data is loaded with readBytes (pread),
// so a file truncated on disk while it loads is a FormatError naming the file and the offset,
// not a SIGBUS. (bytes() views the mapping and, like any mmap, raises SIGBUS when read after
// such a truncation.)
class GgufFile {
 public:
  // InvalidArgument if the path is not a readable regular file, FormatError if malformed.
  static GgufFile open(const std::filesystem::path& path);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  const GgufHeader& header() const { return header_; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  uint64_t fileBytes() const { return map_.size(); }

  // Throws InvalidArgument naming the tensor and the file when absent.
  const GgufTensorInfo& info(std::string_view name) const;
  std::span<const uint8_t> bytes(const GgufTensorInfo& tensor) const;
  std::span<const uint8_t> bytes(std::string_view name) const { return bytes(info(name)); }
  // The tensor's stored bytes copied into `out` (tensor.bytes long) with pread.
  void readBytes(const GgufTensorInfo& tensor, std::span<uint8_t> out) const;

 private:
  GgufFile() = default;

  std::filesystem::path path_;
  MappedFile map_;  // the whole file, read-only
  GgufHeader header_;
};

}  // namespace es::model
