#pragma once
// A tiny safetensors writer for the model tests. The header JSON is assembled as text, not via
// a JSON library, so tests can write exactly the malformed variants they need (duplicate keys,
// wrong offsets, odd dtypes).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace es::test {

struct FakeTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "BF16", "F16", "F32", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly numel * element size bytes for a well-formed file
};

inline int64_t fakeElementSize(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL" || dtype == "F8_E4M3") return 1;
  return 2;
}

// A tensor whose bytes are 0, 1, 2, ... (mod 256).
inline FakeTensor fakeTensor(const std::string& name, const std::string& dtype,
                             std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  FakeTensor t{name, dtype, std::move(shape), {}};
  t.data.resize(static_cast<size_t>(numel * fakeElementSize(dtype)));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i);
  return t;
}

inline std::string shapeJson(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// {"name":{"dtype":"F32","shape":[..],"data_offsets":[b,e]}, ...} with tensors laid out in
// order, back to back.
inline std::string headerJsonFor(const std::vector<FakeTensor>& tensors,
                                 const std::string& metadata_json = "") {
  std::string h = "{";
  bool first = true;
  if (!metadata_json.empty()) {
    h += "\"__metadata__\":" + metadata_json;
    first = false;
  }
  uint64_t offset = 0;
  for (const FakeTensor& t : tensors) {
    const uint64_t end = offset + t.data.size();
    h += std::string(first ? "" : ",") + "\"" + t.name + "\":{\"dtype\":\"" + t.dtype +
         "\",\"shape\":" + shapeJson(t.shape) + ",\"data_offsets\":[" + std::to_string(offset) +
         "," + std::to_string(end) + "]}";
    offset = end;
    first = false;
  }
  return h + "}";
}

// 8-byte little-endian length + header (space-padded to 8 bytes like the reference writer when
// `pad`) + data.
inline std::vector<uint8_t> assembleSafetensors(std::string header,
                                                const std::vector<uint8_t>& data, bool pad = true) {
  if (pad) {
    while (header.size() % 8 != 0) header += ' ';
  }
  const uint64_t n = header.size();
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline std::vector<uint8_t> makeSafetensors(const std::vector<FakeTensor>& tensors,
                                            const std::string& metadata_json = "") {
  std::vector<uint8_t> data;
  for (const FakeTensor& t : tensors) data.insert(data.end(), t.data.begin(), t.data.end());
  return assembleSafetensors(headerJsonFor(tensors, metadata_json), data);
}

inline void writeBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void writeText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto base = std::filesystem::temp_directory_path();
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = base / ("es_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
      if (std::filesystem::create_directory(path_)) return;
    }
    throw std::runtime_error("TempDir: cannot create a directory under " + base.string());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace es::test
