#pragma once
// A small GGUF writer for tests: well-formed files by default, with hooks to break them (magic,
// version, counts, offsets, raw metadata bytes) for the malformed-input tests.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace es::test {

// Little-endian appenders.
inline void putU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void putU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void putStr(std::vector<uint8_t>& out, const std::string& s) {
  putU64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
inline void putF32(std::vector<uint8_t>& out, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  putU32(out, u);
}

// GGUF value type ids.
enum : uint32_t {
  kGU8 = 0,
  kGI8 = 1,
  kGU16 = 2,
  kGI16 = 3,
  kGU32 = 4,
  kGI32 = 5,
  kGF32 = 6,
  kGBool = 7,
  kGString = 8,
  kGArray = 9,
  kGU64 = 10,
  kGI64 = 11,
  kGF64 = 12
};

struct GgufTestTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // default: packed in order, each aligned
};

class GgufTestWriter {
 public:
  uint32_t version = 3;
  std::string magic = "GGUF";
  uint64_t alignment =
      32;  // used for layout; write general.alignment yourself to change the file's
  std::optional<uint64_t> tensor_count_override, kv_count_override;

  // One metadata entry with its value bytes already encoded (type id + value).
  void kvRaw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    std::vector<uint8_t> e;
    putStr(e, key);
    putU32(e, type);
    e.insert(e.end(), value.begin(), value.end());
    kvs_.push_back(std::move(e));
  }
  void kvU32(const std::string& key, uint32_t v) {
    std::vector<uint8_t> b;
    putU32(b, v);
    kvRaw(key, kGU32, b);
  }
  void kvI32(const std::string& key, int32_t v) {
    std::vector<uint8_t> b;
    putU32(b, static_cast<uint32_t>(v));
    kvRaw(key, kGI32, b);
  }
  void kvU64(const std::string& key, uint64_t v) {
    std::vector<uint8_t> b;
    putU64(b, v);
    kvRaw(key, kGU64, b);
  }
  void kvF32(const std::string& key, float v) {
    std::vector<uint8_t> b;
    putF32(b, v);
    kvRaw(key, kGF32, b);
  }
  void kvBool(const std::string& key, bool v) { kvRaw(key, kGBool, {static_cast<uint8_t>(v)}); }
  void kvString(const std::string& key, const std::string& v) {
    std::vector<uint8_t> b;
    putStr(b, v);
    kvRaw(key, kGString, b);
  }
  void kvStringArray(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    putU32(b, kGString);
    putU64(b, v.size());
    for (const std::string& s : v) putStr(b, s);
    kvRaw(key, kGArray, b);
  }
  void kvI32Array(const std::string& key, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b;
    putU32(b, kGI32);
    putU64(b, v.size());
    for (int32_t x : v) putU32(b, static_cast<uint32_t>(x));
    kvRaw(key, kGArray, b);
  }

  void tensor(GgufTestTensor t) { tensors_.push_back(std::move(t)); }
  std::vector<GgufTestTensor>& tensors() { return tensors_; }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out(magic.begin(), magic.end());
    putU32(out, version);
    putU64(out, tensor_count_override.value_or(tensors_.size()));
    putU64(out, kv_count_override.value_or(kvs_.size()));
    for (const auto& e : kvs_) out.insert(out.end(), e.begin(), e.end());
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const GgufTestTensor& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = std::max(next, (off + t.data.size() + alignment - 1) / alignment * alignment);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const GgufTestTensor& t = tensors_[i];
      putStr(out, t.name);
      putU32(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) putU64(out, d);
      putU32(out, t.type);
      putU64(out, offsets[i]);
    }
    while (out.size() % alignment != 0) out.push_back(0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const GgufTestTensor& t = tensors_[i];
      if (out.size() < data_start + offsets[i] + t.data.size())
        out.resize(data_start + offsets[i] + t.data.size(), 0);
      std::copy(t.data.begin(), t.data.end(),
                out.begin() + static_cast<std::ptrdiff_t>(data_start + offsets[i]));
    }
    if (!tensors_.empty()) {
      while ((out.size() - data_start) % alignment != 0) out.push_back(0);
    }
    return out;
  }

 private:
  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<GgufTestTensor> tensors_;
};

// F32 tensor bytes from values.
inline std::vector<uint8_t> f32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace es::test
