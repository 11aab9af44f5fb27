#include "common/mapped_file.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace es {

MappedFile MappedFile::open(const std::filesystem::path& path, std::string_view where,
                            uint64_t minimumBytes, std::string_view tooShort) {
  InputFile input = InputFile::open(path, where);
  const uint64_t size = input.size();
  if (size < std::max<uint64_t>(minimumBytes, 1)) {
    ES_THROW(FormatError, path.string(), ": file is ", size, " bytes, ", tooShort, " (truncated?)");
  }
  void* mapped = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, input.fd(), 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    ES_THROW(InvalidArgument, where, ": argument 'path' = ", path.string(),
             " cannot be memory-mapped: ", std::strerror(err));
  }
  MappedFile file;
  file.file_ = std::move(input);
  file.base_ = static_cast<const uint8_t*>(mapped);
  file.size_ = size;
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : file_(std::move(other.file_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    file_ = std::move(other.file_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}
MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), static_cast<size_t>(size_));
  base_ = nullptr;
  size_ = 0;
}

}  // namespace es
