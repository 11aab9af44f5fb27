#pragma once
// The weights of one Hugging Face model folder: either a single `model.safetensors` or the shards
// named by `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {name: shard}}).
// Every shard is memory-mapped (nothing is copied); lookups go by tensor name.
//
// Checks on open (FormatError naming the folder / file / tensor): the index is strict JSON (no
// duplicate names), every shard is a plain file name inside the folder and exists, every name in
// the weight map is in the shard it names, no tensor is in two shards, and no shard holds a
// tensor the map does not list. Shape/dtype checks against a config are in weight_names.h.
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace es::model {

inline constexpr const char* kSingleWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

class WeightStore {
 public:
  // `dir` is a model folder. `model.safetensors` wins when both it and an index are present
  // (as in transformers). Throws InvalidArgument if `dir` is not a directory, FormatError if it
  // holds neither file or any file is malformed.
  static WeightStore openFolder(const std::filesystem::path& dir);
  // One standalone safetensors file.
  static WeightStore openFile(const std::filesystem::path& file);

  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // Where the tensors came from (the folder, or the file for openFile), for messages.
  const std::string& source() const { return source_; }
  size_t numFiles() const { return files_.size(); }
  const SafetensorsFile& file(size_t i) const { return files_.at(i); }

  size_t size() const { return location_.size(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  // Throw InvalidArgument naming the tensor when absent.
  const TensorInfo& info(std::string_view name) const;
  TensorView view(std::string_view name) const;  // host view over the mapping
  const SafetensorsFile& fileOf(std::string_view name) const;
  uint64_t totalTensorBytes() const;

 private:
  WeightStore() = default;
  size_t indexOf(std::string_view name) const;

  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> location_;  // tensor name -> index into files_
};

}  // namespace es::model
