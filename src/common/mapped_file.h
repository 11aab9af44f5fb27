#pragma once
// A whole file mapped read-only (PROT_READ, MAP_PRIVATE), unmapped on destruction; move-only.
// Opened through InputFile (regular files only, never blocking in open()), whose descriptor it
// keeps for readAt. The checkpoint readers (safetensors, GGUF) parse their headers and hand out
// views from the mapping; the loaders copy tensor data with readAt (pread), so a file truncated
// by someone else while it loads is an error naming the file, not a SIGBUS from the mapping.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "common/input_file.h"

namespace es {

class MappedFile {
 public:
  MappedFile() = default;
  // `where` names the caller in errors. A file that cannot be opened or mapped, or is not a
  // regular file, is an InvalidArgument naming 'path'; one shorter than `minimumBytes` (the
  // format's fixed header; must be >= 1, as mmap refuses empty files) is a FormatError whose
  // message continues with `tooShort` (e.g. "too short for a GGUF header").
  static MappedFile open(const std::filesystem::path& path, std::string_view where,
                         uint64_t minimumBytes, std::string_view tooShort);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return base_; }  // [size()] u8
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {base_, static_cast<size_t>(size_)}; }

  // Copies [offset, offset + bytes) of the file into `dst` with pread (InputFile::readAt): a
  // FormatError naming the file and the offset if the file has shrunk since it was mapped.
  void readAt(uint64_t offset, void* dst, uint64_t bytes) const {
    file_.readAt(offset, dst, bytes);
  }

 private:
  void release() noexcept;

  InputFile file_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace es
