#pragma once
// Streaming writer of one safetensors file (the format model/safetensors.h reads): the header is
// written first from the list of tensors (names, dtypes, shapes, sizes), then each tensor's bytes
// are appended in that order, a piece at a time, so a writer holds no more than the caller's
// current piece in memory. The header is padded with spaces to a multiple of 8 bytes, as the
// reference writer does, so every tensor's data is 8-byte aligned in the file.
//
// The file is written as `path`.tmp and renamed to `path` by finish(); a writer destroyed
// before finish() (an exception on the way) removes the temporary file, so a failed write never
// leaves a truncated `path` behind.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace es::model {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the format's spelling: "BF16", "F16", "F32", "I32", "U8", "F8_E4M3", ...
  std::vector<int64_t> shape;
  uint64_t bytes = 0;  // numel * element size
};

class SafetensorsWriter {
 public:
  // Creates `path`.tmp and writes the header for `entries` (data in their order; names must be
  // unique) with `metadata` as "__metadata__". `what` names the writing command in errors
  // ("convert", "quantize"). InvalidArgument if the file cannot be created or a name repeats.
  SafetensorsWriter(std::filesystem::path path, const std::vector<SafetensorsEntry>& entries,
                    const std::map<std::string, std::string>& metadata, std::string what);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the next bytes of the data section (a whole tensor or a piece of one).
  // InvalidArgument past the end of the data the header announced, or when the disk is full.
  void append(std::span<const uint8_t> bytes);
  // Checks that every announced byte was written, closes the file and renames it to `path`.
  // Returns the file's size.
  uint64_t finish();

 private:
  std::filesystem::path path_, tmp_;
  std::string what_;
  std::ofstream out_;
  uint64_t headerBytes_ = 0, dataBytes_ = 0, written_ = 0;
  bool finished_ = false;
};

}  // namespace es::model
