#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "common/errors.h"
#include "common/json.h"
#include "common/logging.h"

namespace es::model {
namespace {

using nlohmann::json;

// Names from the safetensors Dtype enum that this runtime does not load; listed so the error
// can say "unsupported" rather than "unknown".
constexpr std::string_view kKnownUnsupportedDTypes[] = {
    "BOOL", "U8",      "I8",      "I16", "U16",     "U32",     "I64", "U64",
    "F64",  "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

// A JSON value, shortened for an error message (a hostile header may hold megabytes).
std::string shortJson(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 80;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

// A non-negative JSON integer as u64; false for floats, negatives, booleans and the rest.
bool readUnsigned(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

TensorInfo parseTensorEntry(const std::string& name, const json& entry, std::string_view source,
                            uint64_t data_bytes) {
  const std::string where = std::string(source) + ": tensor " + quoteShort(name);
  if (name.empty()) ES_THROW(FormatError, source, ": a tensor has an empty name");
  if (!entry.is_object()) {
    ES_THROW(FormatError, where, ": entry must be an object, got ", shortJson(entry));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) ES_THROW(FormatError, where, ": missing field '", field, "'");
  }

  TensorInfo info;
  info.name = name;

  const json& dtype = entry.at("dtype");
  if (!dtype.is_string())
    ES_THROW(FormatError, where, ": 'dtype' must be a string, got ", shortJson(dtype));
  const auto& dtype_text = dtype.get_ref<const std::string&>();
  if (!safetensorsDTypeFromName(dtype_text, &info.dtype)) {
    const bool known =
        std::find(std::begin(kKnownUnsupportedDTypes), std::end(kKnownUnsupportedDTypes),
                  dtype_text) != std::end(kKnownUnsupportedDTypes);
    ES_THROW(FormatError, where, ": ", known ? "unsupported" : "unknown", " dtype ",
             quoteShort(dtype_text), " (supported: BF16, F16, F32, F8_E4M3, I32)");
  }

  const json& shape = entry.at("shape");
  if (!shape.is_array())
    ES_THROW(FormatError, where, ": 'shape' must be an array, got ", shortJson(shape));
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    ES_THROW(FormatError, where, ": rank ", shape.size(), " exceeds the limit ", kMaxTensorRank);
  }
  // Element count in u64 with overflow checks: a product that does not fit cannot match any
  // byte range inside a real file.
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = 0;
    if (!readUnsigned(shape[i], &dim) ||
        dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      ES_THROW(FormatError, where, ": shape[", i, "] = ", shortJson(shape[i]),
               " must be an integer in [0, 2^63)");
    }
    info.shape.push_back(static_cast<int64_t>(dim));
    if (!overflow && __builtin_mul_overflow(numel, dim, &numel)) overflow = true;
  }
  uint64_t expected_bytes = 0;
  if (!overflow && __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)),
                                          &expected_bytes)) {
    overflow = true;
  }

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !readUnsigned(offsets[0], &info.begin) ||
      !readUnsigned(offsets[1], &info.end)) {
    ES_THROW(FormatError, where,
             ": 'data_offsets' must be [begin, end] of non-negative integers, got ",
             shortJson(offsets));
  }
  if (info.begin > info.end) {
    ES_THROW(FormatError, where, ": data_offsets begin ", info.begin, " > end ", info.end);
  }
  if (info.end > data_bytes) {
    ES_THROW(FormatError, where, ": data_offsets end ", info.end, " is past the data section (",
             data_bytes, " bytes); the file is truncated or the offsets are corrupt");
  }
  if (overflow || expected_bytes != info.byteSize()) {
    std::ostringstream os;
    os << where << ": shape " << shortJson(shape) << " x " << dtype_name(info.dtype) << " needs ";
    if (overflow) {
      os << "more than 2^64";
    } else {
      os << expected_bytes;
    }
    os << " bytes but data_offsets [" << info.begin << ", " << info.end << ") hold "
       << info.byteSize();
    throw FormatError(os.str());
  }
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: checked against the byte size at parse
  return n;
}

std::string TensorInfo::describe() const {
  std::ostringstream os;
  os << escapeControl(name) << " " << dtype_name(dtype) << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

bool safetensorsDTypeFromName(std::string_view name, DType* out) {
  if (name == "BF16") {
    *out = DType::kBF16;
  } else if (name == "F16") {
    *out = DType::kF16;
  } else if (name == "F32") {
    *out = DType::kF32;
  } else if (name == "F8_E4M3") {
    *out = DType::kF8E4M3;
  } else if (name == "I32") {
    *out = DType::kI32;
  } else {
    return false;
  }
  return true;
}

std::string_view safetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kF32:
      return "F32";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI32:
      return "I32";
    default:
      return {};
  }
}

SafetensorsHeader parseSafetensorsHeader(std::span<const uint8_t> file, std::string_view source) {
  return parseSafetensorsHeader(file, file.size(), source);
}

SafetensorsHeader parseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t fileBytes,
                                         std::string_view source) {
  ES_CHECK_ARG(prefix.size() <= fileBytes && (prefix.size() >= 8 || prefix.size() == fileBytes),
               "parseSafetensorsHeader", "prefix.size()", prefix.size(),
               "must be <= fileBytes = ", fileBytes, " and >= 8 unless it is the whole file");
  if (fileBytes < 8) {
    ES_THROW(FormatError, source, ": file is ", fileBytes,
             " bytes, too short for the 8-byte safetensors header length (truncated?)");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];  // little-endian
  const uint64_t available = fileBytes - 8;
  if (n > kMaxSafetensorsHeaderBytes) {
    ES_THROW(FormatError, source, ": header length ", n, " exceeds the limit ",
             kMaxSafetensorsHeaderBytes, " bytes (not a safetensors file?)");
  }
  if (n > available) {
    ES_THROW(FormatError, source, ": header length ", n, " is past the end of the file (",
             available, " bytes after the length field; truncated?)");
  }
  if (n < 2)
    ES_THROW(FormatError, source, ": header length ", n, " is too short for a JSON object");
  ES_CHECK_ARG(prefix.size() >= 8 + n, "parseSafetensorsHeader", "prefix.size()", prefix.size(),
               "must hold the 8 + ", n, " header bytes");

  SafetensorsHeader header;
  header.header_bytes = n;
  header.data_offset = 8 + n;
  header.data_bytes = fileBytes - header.data_offset;

  // The reference writer pads the header with spaces to 8-byte alignment; tolerate trailing
  // spaces and NULs from other writers too.
  std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), static_cast<size_t>(n));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) text.remove_suffix(1);
  if (text.empty() || text.front() != '{') {
    ES_THROW(FormatError, source, ": header does not start with '{' (not a safetensors file?)");
  }
  const json root = parseJsonStrict(text, std::string(source) + " (safetensors header)");
  if (!root.is_object()) ES_THROW(FormatError, source, ": header must be a JSON object");

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        ES_THROW(FormatError, source, ": '__metadata__' must be an object, got ", shortJson(value));
      }
      for (const auto& [mkey, mvalue] : value.items()) {
        header.metadata[mkey] = mvalue.is_string() ? mvalue.get<std::string>() : mvalue.dump();
      }
      continue;
    }
    header.tensors.push_back(parseTensorEntry(key, value, source, header.data_bytes));
  }
  // nlohmann's object is a std::map, so the tensors arrive sorted by name already; sort anyway
  // so find() does not depend on that.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    if (header.tensors[i].name == header.tensors[i - 1].name) {
      ES_THROW(FormatError, source, ": duplicate tensor ", quoteShort(header.tensors[i].name));
    }
  }

  // Overlap: order the non-empty ranges by start; each must begin at or after the previous end.
  // Gaps are allowed (writers may align tensors); empty tensors occupy no bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : header.tensors) {
    if (t.byteSize() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      ES_THROW(FormatError, source, ": tensors ", quoteShort(prev.name), " [", prev.begin, ", ",
               prev.end, ") and ", quoteShort(cur.name), " [", cur.begin, ", ", cur.end,
               ") overlap in the data section");
    }
  }
  return header;
}

// ---------------------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  SafetensorsFile file;
  file.path_ = path;
  file.map_ = MappedFile::open(path, "SafetensorsFile::open", 8,
                               "too short for the 8-byte safetensors header length");
  // The header is copied out with pread and parsed from the copy, not from the mapping: a file
  // truncated meanwhile is then a FormatError, never a SIGBUS. On a parse error `file` unmaps in
  // its destructor.
  std::vector<uint8_t> prefix(8);
  file.map_.readAt(0, prefix.data(), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];
  if (n <= kMaxSafetensorsHeaderBytes && n <= file.map_.size() - 8) {
    prefix.resize(static_cast<size_t>(8 + n));
    file.map_.readAt(8, prefix.data() + 8, n);
  }
  file.header_ = parseSafetensorsHeader(prefix, file.map_.size(), name);
  for (const TensorInfo& t : file.header_.tensors) {
    if (!file.isAligned(t.name)) {
      ES_LOG_WARN(name, ": tensor ", quoteShort(t.name), " is not aligned to its ",
                  dtype_size(t.dtype),
                  "-byte element size (header not padded); views of it need unaligned access");
      break;
    }
  }
  return file;
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const TensorInfo* t = header_.find(name);
  if (t == nullptr) {
    ES_THROW(InvalidArgument, "SafetensorsFile::info: argument 'name' = ", name,
             " is not a tensor of ", path_.string());
  }
  return *t;
}

std::span<const uint8_t> SafetensorsFile::bytes(std::string_view name) const {
  const TensorInfo& t = info(name);
  return std::span<const uint8_t>(map_.data() + header_.data_offset + t.begin, t.byteSize());
}

void SafetensorsFile::readBytes(std::string_view name, uint64_t offset, void* dst,
                                uint64_t count) const {
  const TensorInfo& t = info(name);
  ES_CHECK_ARG(offset <= t.byteSize() && count <= t.byteSize() - offset,
               "SafetensorsFile::readBytes", "offset + count", offset + count,
               "must be <= the tensor's ", t.byteSize(), " bytes");
  map_.readAt(header_.data_offset + t.begin + offset, dst, count);
}

bool SafetensorsFile::isAligned(std::string_view name) const {
  const TensorInfo& t = info(name);
  const auto address = reinterpret_cast<uintptr_t>(map_.data() + header_.data_offset + t.begin);
  return address % static_cast<uintptr_t>(dtype_size(t.dtype)) == 0;
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo& t = info(name);
  TensorView v;
  // The mapping is read-only; TensorView has no const flavour, so the const is cast away here
  // and a write through the view faults instead of corrupting the file.
  v.data = const_cast<uint8_t*>(map_.data() + header_.data_offset + t.begin);
  v.dtype = t.dtype;
  v.space = MemorySpace::kHost;
  v.rank = static_cast<int>(t.shape.size());
  std::copy(t.shape.begin(), t.shape.end(), v.shape.begin());
  return v;
}

}  // namespace es::model
