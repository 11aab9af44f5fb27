#include "model/weight_store.h"

#include <set>
#include <sstream>

#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"
#include "common/logging.h"
#include "model/gguf_weights.h"
#include "model/quantized_checkpoint.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;

// A shard must name a file directly inside the model folder: no directories, no "..".
bool isPlainFileName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

WeightStore WeightStore::openFile(const fs::path& file) {
  WeightStore store;
  store.source_ = file.string();
  store.files_.push_back(SafetensorsFile::open(file));
  for (const TensorInfo& t : store.files_[0].tensors()) store.location_.emplace(t.name, 0);
  return store;
}

WeightStore WeightStore::openGguf(const fs::path& file, DType dtype) {
  WeightStore store;
  store.source_ = file.string();
  store.gguf_ = GgufWeights::open(file, dtype);
  const auto& entries = store.gguf_->entries();
  for (size_t i = 0; i < entries.size(); ++i) store.location_.emplace(entries[i].info.name, i);
  return store;
}

WeightStore WeightStore::open(const fs::path& path, DType gguf_dtype) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return openFolder(path);
  if (isGgufPath(path)) return openGguf(path, gguf_dtype);
  // Anything else that exists is opened as a safetensors file: InputFile names what is wrong
  // with a FIFO, device or socket instead of this generic message.
  if (fs::exists(path, ec)) return openFile(path);
  ES_THROW(InvalidArgument, "WeightStore::open: argument 'path' = ", path.string(),
           " is neither a model folder nor a GGUF or safetensors file");
}

WeightStore WeightStore::openFolder(const fs::path& dir) {
  WeightStore store = openFolderTensors(dir);
  std::error_code ec;
  // A folder of weights alone (a test's, a draft's shards) may come without config.json.
  if (fs::exists(dir / "config.json", ec)) store.quantization_ = loadQuantizationConfig(dir);
  return store;
}

WeightStore WeightStore::openFolderTensors(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    ES_THROW(InvalidArgument, "WeightStore::openFolder: argument 'dir' = ", dir.string(),
             " is not a directory (expected a model folder containing config.json and "
             "model.safetensors or model.safetensors.index.json)");
  }
  const fs::path single = dir / kSingleWeightsFile;
  const fs::path index_path = dir / kWeightsIndexFile;
  if (fs::exists(single, ec)) {
    if (fs::exists(index_path, ec)) {
      ES_LOG_INFO(dir.string(), ": both ", kSingleWeightsFile, " and ", kWeightsIndexFile,
                  " present; using ", kSingleWeightsFile);
    }
    WeightStore store = openFile(single);
    store.source_ = dir.string();
    return store;
  }
  if (!fs::exists(index_path, ec)) {
    ES_THROW(FormatError, dir.string(), ": no ", kSingleWeightsFile, " and no ", kWeightsIndexFile);
  }

  const std::string where = index_path.string();
  const nlohmann::json index = parseJsonStrict(
      readInputFile(index_path, kMaxWeightsIndexBytes, "WeightStore::openFolder"), where);
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) {
    ES_THROW(FormatError, where, ": must be an object with a 'weight_map' object");
  }
  const nlohmann::json& weight_map = index.at("weight_map");
  if (weight_map.empty()) ES_THROW(FormatError, where, ": 'weight_map' is empty");

  WeightStore store;
  store.source_ = dir.string();
  std::map<std::string, size_t> shard_index;  // shard file name -> index into files_
  std::map<std::string, std::string> listed;  // tensor -> shard, as the index says
  for (const auto& [tensor, shard_value] : weight_map.items()) {
    if (!shard_value.is_string()) {
      ES_THROW(FormatError, where, ": weight_map[", quoteShort(tensor),
               "] must be a shard file name, got ", shard_value.dump());
    }
    const std::string shard = shard_value.get<std::string>();
    if (!isPlainFileName(shard)) {
      ES_THROW(FormatError, where, ": weight_map[", quoteShort(tensor), "] = ", quoteShort(shard),
               " is not a file name inside the model folder");
    }
    if (!shard_index.contains(shard)) {
      const fs::path shard_path = dir / shard;
      if (!fs::exists(shard_path, ec)) {
        ES_THROW(FormatError, where, ": shard ", quoteShort(shard), " (for tensor ",
                 quoteShort(tensor), ") does not exist in ", dir.string());
      }
      shard_index.emplace(shard, store.files_.size());
      store.files_.push_back(SafetensorsFile::open(shard_path));
    }
    listed.emplace(tensor, shard);
  }

  for (const auto& [shard, file_index] : shard_index) {
    for (const TensorInfo& t : store.files_[file_index].tensors()) {
      auto [it, inserted] = store.location_.emplace(t.name, file_index);
      if (!inserted) {
        ES_THROW(FormatError, dir.string(), ": tensor ", quoteShort(t.name), " is in two shards: ",
                 quoteShort(store.files_[it->second].path().filename().string()), " and ",
                 quoteShort(shard));
      }
    }
  }
  for (const auto& [shard, file_index] : shard_index) {
    for (const TensorInfo& t : store.files_[file_index].tensors()) {
      auto listed_it = listed.find(t.name);
      if (listed_it == listed.end()) {
        ES_THROW(FormatError, where, ": shard ", quoteShort(shard), " holds tensor ",
                 quoteShort(t.name), " that weight_map does not list");
      }
      if (listed_it->second != shard) {
        ES_THROW(FormatError, where, ": weight_map puts tensor ", quoteShort(t.name), " in ",
                 quoteShort(listed_it->second), " but it is in ", quoteShort(shard));
      }
    }
  }
  for (const auto& [tensor, shard] : listed) {
    if (!store.location_.contains(tensor)) {
      ES_THROW(FormatError, where, ": weight_map lists tensor ", quoteShort(tensor), " in shard ",
               quoteShort(shard), " but the shard does not hold it");
    }
  }
  return store;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(location_.size());
  for (const auto& [name, file] : location_) out.push_back(name);
  return out;
}

bool WeightStore::contains(std::string_view name) const {
  return location_.find(name) != location_.end();
}

size_t WeightStore::indexOf(std::string_view name) const {
  auto it = location_.find(name);
  if (it == location_.end()) {
    ES_THROW(InvalidArgument, "WeightStore: argument 'name' = ", name, " is not a tensor of ",
             source_);
  }
  return it->second;
}

const TensorInfo& WeightStore::info(std::string_view name) const {
  const size_t i = indexOf(name);
  return gguf_ ? gguf_->entries()[i].info : files_[i].info(name);
}

TensorView WeightStore::view(std::string_view name) const {
  const size_t i = indexOf(name);
  if (gguf_) {
    ES_THROW(InvalidArgument, "WeightStore::view: argument 'name' = ", name,
             " is a tensor of the GGUF file ", source_, ", which has no mapped view in ",
             dtype_name(gguf_->dtype()), "; use read()");
  }
  return files_[i].view(name);
}

HostTensor WeightStore::read(std::string_view name) const {
  const size_t i = indexOf(name);
  HostTensor t;
  if (!gguf_) {
    t.view = files_[i].view(name);
    return t;
  }
  const GgufWeights::Entry& e = gguf_->entries()[i];
  t.storage.resize(static_cast<size_t>(e.info.byteSize()));
  gguf_->read(e, t.storage);
  t.view.data = t.storage.empty() ? nullptr : t.storage.data();
  t.view.dtype = e.info.dtype;
  t.view.space = MemorySpace::kHost;
  t.view.rank = static_cast<int>(e.info.shape.size());
  for (size_t d = 0; d < e.info.shape.size(); ++d) t.view.shape[d] = e.info.shape[d];
  return t;
}

std::optional<QuantFormat> WeightStore::quantFormat(std::string_view name) const {
  if (gguf_) return gguf_->quantFormat(gguf_->entries()[indexOf(name)]);
  if (quantization_.quantized()) {
    if (std::optional<QuantFormat> f = quantizedLinearFormat(*this, quantization_, name)) return f;
  }
  indexOf(name);  // InvalidArgument naming an unknown tensor
  return std::nullopt;
}

HostQuantizedMatrix WeightStore::readQuantized(std::string_view name) const {
  if (gguf_) return gguf_->readQuantized(gguf_->entries()[indexOf(name)]);
  if (quantFormat(name)) {
    const std::array<int64_t, 2> nk = matrixShape(name);
    return readQuantizedLinear(*this, quantization_, name, nk[0], nk[1]);
  }
  ES_THROW(InvalidArgument, "WeightStore::readQuantized: argument 'name' = ", name, " is a ",
           dtype_name(info(name).dtype), " tensor of ", source_,
           ", not a quantized one; use read()");
}

std::array<int64_t, 2> WeightStore::matrixShape(std::string_view name) const {
  if (!gguf_ && quantization_.quantized()) {
    if (std::optional<std::array<int64_t, 2>> nk =
            quantizedLinearShape(*this, quantization_, name)) {
      return *nk;
    }
  }
  const TensorInfo& t = info(name);
  ES_CHECK_ARG(t.shape.size() == 2, "WeightStore::matrixShape", "name", name, "must be a matrix (",
               source_, " holds it as ", t.describe(), ")");
  return {t.shape[0], t.shape[1]};
}

void WeightStore::readBytes(std::string_view name, uint64_t offset, void* dst,
                            uint64_t count) const {
  fileOf(name).readBytes(name, offset, dst, count);
}

std::string WeightStore::ggufOrigin(std::string_view name) const {
  const size_t i = indexOf(name);
  if (!gguf_) return "";
  const GgufTensorInfo& g = gguf_->ggufTensor(gguf_->entries()[i]);
  return g.name + " " + ggmlTypeName(g.type);
}

const SafetensorsFile& WeightStore::fileOf(std::string_view name) const {
  const size_t i = indexOf(name);
  if (gguf_) {
    ES_THROW(InvalidArgument, "WeightStore::fileOf: argument 'name' = ", name,
             " is a tensor of the GGUF file ", source_, ", not of a safetensors file");
  }
  return files_[i];
}

uint64_t WeightStore::totalTensorBytes() const {
  uint64_t total = 0;
  if (gguf_) {
    for (const GgufWeights::Entry& e : gguf_->entries()) total += e.info.byteSize();
  }
  for (const SafetensorsFile& f : files_) {
    for (const TensorInfo& t : f.tensors()) total += t.byteSize();
  }
  return total;
}

}  // namespace es::model
