#include "model/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "common/errors.h"

namespace es::model {
namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};

// Size in bytes of one scalar of `t`; 0 for string/array (variable) and unknown types.
uint64_t scalarBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool knownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

// The fewest bytes one element of type `t` can occupy: bounds an array's count against the
// bytes left before anything is allocated.
uint64_t minElementBytes(GgufValueType t) {
  if (t == GgufValueType::kString) return 8;  // u64 length
  if (t == GgufValueType::kArray) return 12;  // u32 type + u64 count
  return scalarBytes(t);
}

bool isIntegerType(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool isSignedType(GgufValueType t) {
  return t == GgufValueType::kI8 || t == GgufValueType::kI16 || t == GgufValueType::kI32 ||
         t == GgufValueType::kI64;
}

// Little-endian load of `n` bytes, sign-extended when `is_signed`.
uint64_t loadLe(const uint8_t* p, uint64_t n, bool is_signed) {
  uint64_t v = 0;
  for (uint64_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  if (is_signed && n < 8 && (v >> (8 * n - 1)) & 1u) v |= ~uint64_t{0} << (8 * n);
  return v;
}

double bitsToDouble(uint64_t bits, GgufValueType t) {
  if (t == GgufValueType::kF32) {
    float f;
    const auto u = static_cast<uint32_t>(bits);
    std::memcpy(&f, &u, 4);
    return f;
  }
  if (t == GgufValueType::kF64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (isSignedType(t)) return static_cast<double>(static_cast<int64_t>(bits));
  if (t == GgufValueType::kBool) return bits != 0 ? 1.0 : 0.0;
  return static_cast<double>(bits);
}

bool bitsToInt(uint64_t bits, GgufValueType t, int64_t* out) {
  if (!isIntegerType(t)) return false;
  if (!isSignedType(t) && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return false;
  *out = static_cast<int64_t>(bits);
  return true;
}

// Bounds-checked cursor over the file, which it sees through a prefix that `more` extends on
// demand (the whole file when `more` is null). Every read names what it was reading when it
// fails.
class Reader {
 public:
  Reader(std::span<const uint8_t> prefix, uint64_t fileBytes, const GgufBytesSource* more,
         std::string_view source)
      : prefix_(prefix), fileBytes_(fileBytes), more_(more), source_(source) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return fileBytes_ - pos_; }
  const std::string& source() const { return source_; }

  void need(uint64_t n, std::string_view what) {
    if (n > left()) {
      ES_THROW(FormatError, source_, ": ", what, " needs ", n, " bytes at offset ", pos_,
               " but only ", left(), " remain (truncated?)");
    }
    if (pos_ + n > prefix_.size()) {
      if (more_ != nullptr) prefix_ = (*more_)(pos_ + n);
      if (pos_ + n > prefix_.size()) {
        ES_THROW(Error, source_, ": parseGgufHeader: the bytes source gave ", prefix_.size(),
                 " bytes, ", pos_ + n, " needed");
      }
    }
  }
  uint64_t scalar(uint64_t n, bool is_signed, std::string_view what) {
    need(n, what);
    const uint64_t v = loadLe(prefix_.data() + pos_, n, is_signed);
    pos_ += n;
    return v;
  }
  uint32_t u32(std::string_view what) { return static_cast<uint32_t>(scalar(4, false, what)); }
  uint64_t u64(std::string_view what) { return scalar(8, false, what); }
  std::string string(std::string_view what, uint64_t max_bytes) {
    const uint64_t n = u64(what);
    if (n > max_bytes) {
      ES_THROW(FormatError, source_, ": ", what, " length ", n, " exceeds the limit ", max_bytes);
    }
    need(n, what);
    std::string s(reinterpret_cast<const char*>(prefix_.data() + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  // The next n bytes; valid until the next read (a read may move the prefix).
  const uint8_t* take(uint64_t n, std::string_view what) {
    need(n, what);
    const uint8_t* p = prefix_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  std::span<const uint8_t> prefix_;
  uint64_t fileBytes_;
  const GgufBytesSource* more_;
  std::string source_;
  uint64_t pos_ = 0;
};

GgufValue readValue(Reader& r, GgufValueType type, int depth, const std::string& what);

GgufValue readArray(Reader& r, int depth, const std::string& what) {
  if (depth >= kGgufMaxArrayDepth) {
    ES_THROW(FormatError, r.source(), ": ", what, " nests arrays deeper than the limit ",
             kGgufMaxArrayDepth);
  }
  GgufValue v;
  v.type = GgufValueType::kArray;
  const uint32_t et = r.u32(what + " element type");
  if (!knownValueType(et))
    ES_THROW(FormatError, r.source(), ": ", what, " has unknown element type ", et);
  v.element_type = static_cast<GgufValueType>(et);
  v.count = r.u64(what + " count");
  const uint64_t min_bytes = minElementBytes(v.element_type);
  if (v.count > r.left() / min_bytes) {
    ES_THROW(FormatError, r.source(), ": ", what, " count ", v.count, " of ",
             ggufValueTypeName(v.element_type), " needs at least ", min_bytes,
             " bytes each but only ", r.left(), " remain (truncated or corrupt)");
  }
  if (v.element_type == GgufValueType::kString) {
    v.strings.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i)
      v.strings.push_back(r.string(what + " element", r.left()));
  } else if (v.element_type == GgufValueType::kArray) {
    v.arrays.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.arrays.push_back(readArray(r, depth + 1, what));
  } else {
    const uint8_t* p = r.take(v.count * min_bytes, what);  // count * size <= left: no overflow
    v.raw.assign(p, p + v.count * min_bytes);
    if (v.element_type == GgufValueType::kBool) {
      for (uint8_t b : v.raw) {
        if (b > 1)
          ES_THROW(FormatError, r.source(), ": ", what, " holds bool value ", int{b},
                   " (must be 0 or 1)");
      }
    }
  }
  return v;
}

GgufValue readValue(Reader& r, GgufValueType type, int depth, const std::string& what) {
  if (type == GgufValueType::kArray) return readArray(r, depth, what);
  GgufValue v;
  v.type = type;
  if (type == GgufValueType::kString) {
    v.string = r.string(what, r.left());
    return v;
  }
  v.scalar = r.scalar(scalarBytes(type), isSignedType(type), what);
  if (type == GgufValueType::kBool && v.scalar > 1) {
    ES_THROW(FormatError, r.source(), ": ", what, " holds bool value ", v.scalar,
             " (must be 0 or 1)");
  }
  return v;
}

GgufTensorInfo readTensorInfo(Reader& r, uint64_t index) {
  GgufTensorInfo t;
  const std::string at = "tensor info #" + std::to_string(index);
  t.name = r.string(at + " name", kGgufMaxTensorNameBytes);
  if (t.name.empty()) ES_THROW(FormatError, r.source(), ": ", at, " has an empty name");
  const std::string where = "tensor " + quoteShort(t.name);
  const uint32_t n_dims = r.u32(where + " n_dims");
  if (n_dims < 1 || n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
    ES_THROW(FormatError, r.source(), ": ", where, ": n_dims = ", n_dims, " must be in [1, ",
             kGgufMaxDims, "]");
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t dim = r.u64(where + " dims");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      ES_THROW(FormatError, r.source(), ": ", where, ": dims[", d, "] = ", dim, " must be < 2^63");
    }
    t.dims.push_back(dim);
    if (!overflow && __builtin_mul_overflow(numel, dim, &numel)) overflow = true;
  }
  t.type = r.u32(where + " type");
  const auto traits = ggmlTypeTraits(t.type);
  if (!traits) {
    ES_THROW(FormatError, r.source(), ": ", where, ": unknown ggml tensor type ", t.type,
             " (this reader knows F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q8_K, "
             "I8..F64)");
  }
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    ES_THROW(FormatError, r.source(), ": ", where, ": element count of dims overflows 2^63");
  }
  if (t.dims[0] % traits->block_elems != 0) {
    ES_THROW(FormatError, r.source(), ": ", where, ": dims[0] = ", t.dims[0],
             " is not a multiple of the ", traits->name, " block size ", traits->block_elems);
  }
  t.numel = numel;
  if (__builtin_mul_overflow(numel / traits->block_elems, traits->block_bytes, &t.bytes)) {
    ES_THROW(FormatError, r.source(), ": ", where, ": byte size overflows 2^64");
  }
  t.offset = r.u64(where + " offset");
  return t;
}

}  // namespace

std::string_view ggufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "?";
}

std::optional<GgmlTypeTraits> ggmlTypeTraits(uint32_t type) {
  // Block sizes from ggml's block structs: d/m are fp16, K-quants use 256-element super-blocks.
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return GgmlTypeTraits{"F32", 1, 4};
    case GgmlType::kF16:
      return GgmlTypeTraits{"F16", 1, 2};
    case GgmlType::kQ4_0:
      return GgmlTypeTraits{"Q4_0", 32, 2 + 16};
    case GgmlType::kQ4_1:
      return GgmlTypeTraits{"Q4_1", 32, 2 + 2 + 16};
    case GgmlType::kQ5_0:
      return GgmlTypeTraits{"Q5_0", 32, 2 + 4 + 16};
    case GgmlType::kQ5_1:
      return GgmlTypeTraits{"Q5_1", 32, 2 + 2 + 4 + 16};
    case GgmlType::kQ8_0:
      return GgmlTypeTraits{"Q8_0", 32, 2 + 32};
    case GgmlType::kQ8_1:
      return GgmlTypeTraits{"Q8_1", 32, 2 + 2 + 32};
    case GgmlType::kQ2_K:
      return GgmlTypeTraits{"Q2_K", 256, 2 + 2 + 16 + 64};
    case GgmlType::kQ3_K:
      return GgmlTypeTraits{"Q3_K", 256, 32 + 64 + 12 + 2};
    case GgmlType::kQ4_K:
      return GgmlTypeTraits{"Q4_K", 256, 2 + 2 + 12 + 128};
    case GgmlType::kQ5_K:
      return GgmlTypeTraits{"Q5_K", 256, 2 + 2 + 12 + 32 + 128};
    case GgmlType::kQ6_K:
      return GgmlTypeTraits{"Q6_K", 256, 128 + 64 + 16 + 2};
    case GgmlType::kQ8_K:
      return GgmlTypeTraits{"Q8_K", 256, 4 + 256 + 32};
    case GgmlType::kI8:
      return GgmlTypeTraits{"I8", 1, 1};
    case GgmlType::kI16:
      return GgmlTypeTraits{"I16", 1, 2};
    case GgmlType::kI32:
      return GgmlTypeTraits{"I32", 1, 4};
    case GgmlType::kI64:
      return GgmlTypeTraits{"I64", 1, 8};
    case GgmlType::kF64:
      return GgmlTypeTraits{"F64", 1, 8};
    case GgmlType::kBF16:
      return GgmlTypeTraits{"BF16", 1, 2};
  }
  return std::nullopt;
}

std::string ggmlTypeName(uint32_t type) {
  const auto traits = ggmlTypeTraits(type);
  return traits ? std::string(traits->name) : "type " + std::to_string(type);
}

// ---------------------------------------------------------------------------------------------

bool GgufValue::isInteger() const { return isIntegerType(type); }
bool GgufValue::isFloat() const {
  return type == GgufValueType::kF32 || type == GgufValueType::kF64;
}
bool GgufValue::asInt(int64_t* out) const { return bitsToInt(scalar, type, out); }
double GgufValue::asDouble() const { return bitsToDouble(scalar, type); }

bool GgufValue::intElement(uint64_t i, int64_t* out) const {
  if (type != GgufValueType::kArray || i >= count || !isIntegerType(element_type)) return false;
  const uint64_t n = scalarBytes(element_type);
  return bitsToInt(loadLe(raw.data() + i * n, n, isSignedType(element_type)), element_type, out);
}

std::string GgufValue::describeType() const {
  if (type != GgufValueType::kArray) return std::string(ggufValueTypeName(type));
  return "array[" + std::string(ggufValueTypeName(element_type)) + "]";
}

std::vector<int64_t> GgufTensorInfo::rowMajorShape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());  // dims < 2^63: checked at parse
}

std::string GgufTensorInfo::describe() const {
  std::ostringstream os;
  os << escapeControl(name) << " " << ggmlTypeName(type) << " (";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << ")";
  return os.str();
}

// ---------------------------------------------------------------------------------------------

const GgufTensorInfo* GgufHeader::findTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufValue& GgufHeader::require(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr)
    ES_THROW(FormatError, source, ": metadata key ", quoteShort(key), " is missing");
  return *v;
}

namespace {
[[noreturn]] void wrongType(const GgufHeader& h, std::string_view key, const GgufValue& v,
                            std::string_view expected) {
  ES_THROW(FormatError, h.source, ": metadata key ", quoteShort(key), " has type ",
           v.describeType(), ", expected ", expected);
}
}  // namespace

std::string GgufHeader::getString(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::kString) wrongType(*this, key, v, "string");
  return v.string;
}

std::optional<std::string> GgufHeader::optString(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return getString(key);
}

int64_t GgufHeader::getInt(std::string_view key, int64_t lo, int64_t hi) const {
  const GgufValue& v = require(key);
  int64_t x = 0;
  if (!v.isInteger()) wrongType(*this, key, v, "an integer");
  if (!v.asInt(&x) || x < lo || x > hi) {
    ES_THROW(FormatError, source, ": metadata key ", quoteShort(key), " = ", v.scalar,
             " must be in [", lo, ", ", hi, "]");
  }
  return x;
}

std::optional<int64_t> GgufHeader::optInt(std::string_view key, int64_t lo, int64_t hi) const {
  if (!has(key)) return std::nullopt;
  return getInt(key, lo, hi);
}

double GgufHeader::getFloat(std::string_view key) const {
  const GgufValue& v = require(key);
  if (!v.isFloat()) wrongType(*this, key, v, "f32 or f64");
  return v.asDouble();
}

std::optional<double> GgufHeader::optFloat(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return getFloat(key);
}

std::optional<bool> GgufHeader::optBool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::kBool) wrongType(*this, key, *v, "bool");
  return v->scalar != 0;
}

const std::vector<std::string>& GgufHeader::getStringArray(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::kArray || v.element_type != GgufValueType::kString) {
    wrongType(*this, key, v, "array[string]");
  }
  return v.strings;
}

std::vector<int64_t> GgufHeader::getIntArray(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufValueType::kArray || !isIntegerType(v.element_type))
    wrongType(*this, key, v, "an integer array");
  std::vector<int64_t> out(static_cast<size_t>(v.count));
  for (uint64_t i = 0; i < v.count; ++i) {
    if (!v.intElement(i, &out[static_cast<size_t>(i)])) {
      ES_THROW(FormatError, source, ": metadata key ", quoteShort(key), " element ", i,
               " does not fit in int64");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

GgufHeader parseGgufHeader(std::span<const uint8_t> file, std::string_view source) {
  return parseGgufHeader(file, file.size(), nullptr, source);
}

GgufHeader parseGgufHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                           const GgufBytesSource& more, std::string_view source) {
  ES_CHECK_ARG(prefix.size() <= fileBytes && prefix.size() >= std::min<uint64_t>(fileBytes, 4),
               "parseGgufHeader", "prefix.size()", prefix.size(), "must be in [min(4, ", fileBytes,
               "), fileBytes = ", fileBytes, "]");
  Reader r(prefix, fileBytes, more ? &more : nullptr, source);
  GgufHeader h;
  h.source = std::string(source);

  if (fileBytes < 4 || std::memcmp(prefix.data(), kMagic, 4) != 0) {
    std::ostringstream os;
    os << source << ": bad magic ";
    for (size_t i = 0; i < std::min<size_t>(4, prefix.size()); ++i) {
      os << (i ? " " : "") << "0x" << std::hex << static_cast<int>(prefix[i]) << std::dec;
    }
    os << " (expected \"GGUF\"; not a GGUF file" << (fileBytes < 4 ? ", or truncated" : "") << ")";
    throw FormatError(os.str());
  }
  r.take(4, "magic");
  h.version = r.u32("version");
  if (h.version != 3 && h.version != 2) {
    const uint32_t swapped = __builtin_bswap32(h.version);
    ES_THROW(FormatError, source, ": GGUF version ", h.version,
             " is not supported (supported: 3, 2)",
             swapped == 2 || swapped == 3 ? "; this looks like a big-endian file" : "",
             h.version == 1 ? "; v1 files predate 64-bit counts, convert them with llama.cpp" : "");
  }
  const uint64_t tensor_count = r.u64("tensor count");
  const uint64_t kv_count = r.u64("metadata count");
  // Each KV needs >= 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; each tensor info
  // >= 8 + 1 (name) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (kv_count > r.left() / 14) {
    ES_THROW(FormatError, source, ": metadata count ", kv_count, " cannot fit in the ", r.left(),
             " bytes after the header (corrupt count?)");
  }
  if (tensor_count > r.left() / 33) {
    ES_THROW(FormatError, source, ": tensor count ", tensor_count, " cannot fit in the ", r.left(),
             " bytes after the header (corrupt count?)");
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = r.string("metadata key #" + std::to_string(i), kGgufMaxKeyBytes);
    if (key.empty()) ES_THROW(FormatError, source, ": metadata key #", i, " is empty");
    const std::string what = "metadata " + quoteShort(key);
    const uint32_t type = r.u32(what + " type");
    if (!knownValueType(type))
      ES_THROW(FormatError, source, ": ", what, " has unknown value type ", type);
    GgufValue value = readValue(r, static_cast<GgufValueType>(type), 0, what);
    if (h.metadata.count(key) != 0)
      ES_THROW(FormatError, source, ": duplicate metadata key ", quoteShort(key));
    h.metadata.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = h.find("general.alignment")) {
    int64_t alignment = 0;
    if (!a->isInteger() || !a->asInt(&alignment) || alignment <= 0 ||
        static_cast<uint64_t>(alignment) > kGgufMaxAlignment ||
        (alignment & (alignment - 1)) != 0) {
      ES_THROW(FormatError, source, ": 'general.alignment' (", a->describeType(),
               ") = ", a->isInteger() ? std::to_string(a->scalar) : std::string("?"),
               " must be a power of two in [1, ", kGgufMaxAlignment, "]");
    }
    h.alignment = static_cast<uint64_t>(alignment);
  }

  h.tensors.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t = readTensorInfo(r, i);
    if (h.tensor_index_.count(t.name) != 0)
      ES_THROW(FormatError, source, ": duplicate tensor ", quoteShort(t.name));
    h.tensor_index_.emplace(t.name, h.tensors.size());
    h.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (pos <= size, alignment <=
  // 2^20: no overflow). A file without tensors may end before that padding.
  const uint64_t pos = r.pos();
  const uint64_t aligned = (pos + h.alignment - 1) / h.alignment * h.alignment;
  if (aligned > fileBytes) {
    if (!h.tensors.empty()) {
      ES_THROW(FormatError, source, ": data section would start at ", aligned, " (alignment ",
               h.alignment, ") past the end of the ", fileBytes, "-byte file (truncated?)");
    }
    h.data_offset = fileBytes;
  } else {
    h.data_offset = aligned;
  }
  h.data_bytes = fileBytes - h.data_offset;

  for (const GgufTensorInfo& t : h.tensors) {
    const std::string where = "tensor " + quoteShort(t.name);
    if (t.offset % h.alignment != 0) {
      ES_THROW(FormatError, source, ": ", where, ": offset ", t.offset,
               " is not a multiple of the alignment ", h.alignment);
    }
    if (t.offset > h.data_bytes || t.bytes > h.data_bytes - t.offset) {
      ES_THROW(FormatError, source, ": ", where, " (", ggmlTypeName(t.type), ", ", t.bytes,
               " bytes at offset ", t.offset, ") is past the end of the ", h.data_bytes,
               "-byte data section (truncated?)");
    }
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : h.tensors) {
    if (t.bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
              return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
            });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur = *by_offset[i];
    if (cur.offset < prev.offset + prev.bytes) {  // in bounds: checked above
      ES_THROW(FormatError, source, ": tensors ", quoteShort(prev.name), " [", prev.offset, ", ",
               prev.offset + prev.bytes, ") and ", quoteShort(cur.name), " [", cur.offset, ", ",
               cur.offset + cur.bytes, ") overlap in the data section");
    }
  }
  return h;
}

// ---------------------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  GgufFile file;
  file.path_ = path;
  file.map_ = MappedFile::open(path, "GgufFile::open", 24, "too short for a GGUF header");
  // The header is parsed from a pread copy of the file's first bytes, grown (doubling) as the
  // parser asks for more, never from the mapping: a file truncated meanwhile is then a
  // FormatError, not a SIGBUS.
  const uint64_t size = file.map_.size();
  std::vector<uint8_t> prefix(static_cast<size_t>(std::min(size, kGgufFirstHeaderRead)));
  file.map_.readAt(0, prefix.data(), prefix.size());
  const GgufBytesSource more = [&](uint64_t needed) {
    const uint64_t want = std::min(size, std::max<uint64_t>(needed, 2 * prefix.size()));
    const size_t have = prefix.size();
    prefix.resize(static_cast<size_t>(want));
    file.map_.readAt(have, prefix.data() + have, want - have);
    return std::span<const uint8_t>(prefix);
  };
  file.header_ = parseGgufHeader(prefix, size, more, name);
  return file;
}

const GgufTensorInfo& GgufFile::info(std::string_view name) const {
  const GgufTensorInfo* t = header_.findTensor(name);
  if (t == nullptr) {
    ES_THROW(InvalidArgument, "GgufFile::info: argument 'name' = ", name, " is not a tensor of ",
             path_.string());
  }
  return *t;
}

std::span<const uint8_t> GgufFile::bytes(const GgufTensorInfo& tensor) const {
  return std::span<const uint8_t>(map_.data() + header_.data_offset + tensor.offset, tensor.bytes);
}

void GgufFile::readBytes(const GgufTensorInfo& tensor, std::span<uint8_t> out) const {
  ES_CHECK_ARG(out.size() == tensor.bytes, "GgufFile::readBytes", "out.size()", out.size(),
               "must be the stored size ", tensor.bytes, " of tensor ", quoteShort(tensor.name));
  map_.readAt(header_.data_offset + tensor.offset, out.data(), out.size());
}

}  // namespace es::model
