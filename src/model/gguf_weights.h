#pragma once
// The tensors of a GGUF file as the Hugging Face checkpoint they stand for: HF names, row-major
// HF shapes, values dequantised (gguf_dequant.h) on demand into f32, bf16 or f16, Llama q/k rows
// un-permuted (gguf_convert.h). One object serves both `edgespec convert` (which writes every
// tensor to a safetensors file) and loading a .gguf directly (WeightStore::openGguf), so the two
// paths produce the same bytes by construction.
//
// Everything is validated at open, before any tensor is read: the config derived from the
// metadata (hfConfigJson -> parseModelConfig), every tensor name mapped to an HF name the
// architecture expects, its shape, its ggml type dequantisable, and no expected tensor missing;
// one FormatError lists every problem (8 per kind).
//
// Reading is bounded: read() copies the tensor's stored (quantised) bytes out of the file with
// pread (GgufFile::readBytes) and fills one tensor, dequantising a row (or a few rows) at a time
// through an f32 scratch of at most kGgufReadChunkElems elements.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "model/gguf.h"
#include "model/host_quantized_matrix.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace es::model {

inline constexpr int64_t kGgufReadChunkElems = int64_t{1} << 20;

class GgufWeights {
 public:
  struct Entry {
    size_t gguf_index = 0;      // into file().tensors()
    TensorInfo info;            // HF name, dtype(), HF shape; begin = 0, end = numel * dtype size
    int64_t permute_heads = 0;  // > 0: Llama q/k rows to un-permute for this many heads
  };

  // Opens and validates `path`; `dtype` (f32, bf16 or f16) is what read() produces. Throws
  // InvalidArgument for a bad path or dtype, FormatError for a file that is not a loadable model.
  static std::unique_ptr<const GgufWeights> open(const std::filesystem::path& path, DType dtype);

  GgufWeights(const GgufWeights&) = delete;
  GgufWeights& operator=(const GgufWeights&) = delete;

  const GgufFile& file() const { return file_; }
  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const std::vector<Entry>& entries() const { return entries_; }  // file order
  const GgufTensorInfo& ggufTensor(const Entry& e) const { return file_.tensors()[e.gguf_index]; }

  // Fills `out` (e.info.byteSize() bytes, aligned for dtype()) with the tensor in HF layout.
  void read(const Entry& e, std::span<uint8_t> out) const;

  // The format a linear layer's weight (an HF name ending in "_proj.weight", or
  // "lm_head.weight") keeps when a backend runs it quantized: its ggml type's, where
  // quantFormatOfGgmlType has one; nullopt for every other tensor (embeddings, norms, biases,
  // F32 / F16 / BF16 matrices), which read() serves.
  std::optional<QuantFormat> quantFormat(const Entry& e) const;
  // The stored blocks of a tensor quantFormat(e) keeps, as rows of the HF layout (Llama q/k rows
  // un-permuted by moving whole rows, as read() moves their values). InvalidArgument naming the
  // tensor when quantFormat(e) is nullopt.
  HostQuantizedMatrix readQuantized(const Entry& e) const;

 private:
  GgufWeights(GgufFile file, DType dtype);

  GgufFile file_;
  DType dtype_;
  ModelConfig config_;
  std::vector<Entry> entries_;
};

// True when `path` is not a directory and is named *.gguf (existing or not: opening it then says
// what is wrong), or is a regular file starting with the GGUF magic. The loaders
// (loadModelConfig, WeightStore::open, edgespec generate/inspect) take such paths as GGUF models.
bool isGgufPath(const std::filesystem::path& path);

}  // namespace es::model
