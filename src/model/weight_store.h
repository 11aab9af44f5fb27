#pragma once
// The weights of one Hugging Face model folder: either a single `model.safetensors` or the shards
// named by `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {name: shard}}).
// Every shard is memory-mapped (nothing is copied); lookups go by tensor name.
//
// A store can also be opened on a GGUF file (openGguf, or open() on a path that is one): it then
// lists the tensors under their HF names and shapes (gguf_weights.h: Llama q/k un-permuted) in
// the dtype chosen at open, and read() dequantises one tensor per call into memory the returned
// HostTensor owns. Peak host memory is then one tensor and its stored bytes (plus a bounded f32
// scratch), whatever the model size. view() is for mapped safetensors only; read() works on both
// kinds. Loaders copy safetensors data with readBytes (pread), not through the mapping, so a
// file truncated on disk while it loads is an error naming the file, not a SIGBUS.
//
// Checks on open (FormatError naming the folder / file / tensor): the index is strict JSON (no
// duplicate names), every shard is a plain file name inside the folder and exists, every name in
// the weight map is in the shard it names, no tensor is in two shards, and no shard holds a
// tensor the map does not list. Shape/dtype checks against a config are in weight_names.h.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/quant_format.h"
#include "model/host_quantized_matrix.h"
#include "model/quantization_config.h"
#include "model/safetensors.h"

namespace es::model {

inline constexpr const char* kSingleWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

class GgufWeights;

// A tensor's bytes on the host, in the dtype and shape info() reports: a view into the mapping
// (safetensors; `storage` empty) or into `storage` (a GGUF tensor dequantised by read()). Moving
// a HostTensor keeps `view` valid (a vector's buffer moves with it).
struct HostTensor {
  TensorView view;
  std::vector<uint8_t> storage;
};

class WeightStore {
 public:
  // `dir` is a model folder. `model.safetensors` wins when both it and an index are present
  // (as in transformers). Throws InvalidArgument if `dir` is not a directory, FormatError if it
  // holds neither file or any file is malformed.
  static WeightStore openFolder(const std::filesystem::path& dir);
  // One standalone safetensors file.
  static WeightStore openFile(const std::filesystem::path& file);
  // A GGUF model file, its tensors read as `dtype` (f32, bf16 or f16). FormatError (one message
  // listing them) for tensors that are unknown, misshapen, missing or of a type that cannot be
  // dequantised, and for metadata that gives no supported config.
  static WeightStore openGguf(const std::filesystem::path& file, DType dtype = DType::kF32);
  // Whichever of the three `path` is: a directory (openFolder), a GGUF file (isGgufPath:
  // openGguf with `gguf_dtype`), another regular file (openFile). InvalidArgument otherwise.
  static WeightStore open(const std::filesystem::path& path, DType gguf_dtype = DType::kF32);

  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // Where the tensors came from (the folder, or the file for openFile), for messages.
  const std::string& source() const { return source_; }
  bool isGguf() const { return gguf_ != nullptr; }
  size_t numFiles() const { return files_.size(); }  // safetensors files (0 for a GGUF store)
  const SafetensorsFile& file(size_t i) const { return files_.at(i); }

  size_t size() const { return location_.size(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  // Throw InvalidArgument naming the tensor when absent.
  const TensorInfo& info(std::string_view name) const;
  // Host view over the mapping; InvalidArgument on a GGUF store (its tensors need read()).
  TensorView view(std::string_view name) const;
  // The tensor in host memory: the mapping's view (safetensors) or a dequantised copy (GGUF).
  HostTensor read(std::string_view name) const;
  // Bytes [offset, offset + count) of a safetensors tensor copied into `dst` with pread
  // (SafetensorsFile::readBytes); InvalidArgument on a GGUF store (its tensors need read()).
  void readBytes(std::string_view name, uint64_t offset, void* dst, uint64_t count) const;
  // The quantization_config of the folder's config.json (method kNone without one, and for a
  // single file or a GGUF store, whose quantized tensors are ggml types).
  const QuantizationConfig& quantization() const { return quantization_; }
  // The format linear weight `name` (its dense name, "….q_proj.weight") is stored quantized in,
  // which a backend that runs it keeps (model/linear_weight.h); nullopt for a dense tensor.
  // GGUF: a linear weight of a ggml type quantFormatOfGgmlType knows (GgufWeights::quantFormat).
  // A quantized folder: quantizedLinearFormat (model/quantized_checkpoint.h), whose AWQ / GPTQ
  // linears have no tensor of the dense name (contains(name) is false).
  std::optional<QuantFormat> quantFormat(std::string_view name) const;
  // The quantized rows of `name` in the backend layout (common/quant_format.h); InvalidArgument
  // naming the tensor when quantFormat(name) is nullopt.
  HostQuantizedMatrix readQuantized(std::string_view name) const;
  // [rows, columns] of matrix `name`: its shape, or for a quantized folder's linear the [n, k]
  // its quantized tensors hold (the shape read() would give it dense).
  std::array<int64_t, 2> matrixShape(std::string_view name) const;
  // For a GGUF store, where a tensor comes from ("blk.0.attn_q.weight Q4_1"); empty otherwise.
  std::string ggufOrigin(std::string_view name) const;
  const SafetensorsFile& fileOf(std::string_view name) const;  // InvalidArgument on a GGUF store
  uint64_t totalTensorBytes() const;

 private:
  WeightStore() = default;
  static WeightStore openFolderTensors(const std::filesystem::path& dir);
  size_t indexOf(std::string_view name) const;

  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::shared_ptr<const GgufWeights> gguf_;  // set for a GGUF store (then files_ is empty)
  // tensor name -> index into files_ (safetensors) or into gguf_->entries() (GGUF)
  std::map<std::string, size_t, std::less<>> location_;
  QuantizationConfig quantization_;
};

}  // namespace es::model
