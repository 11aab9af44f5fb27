#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace es {

MappedFile MappedFile::open(const std::filesystem::path& path, std::string_view where,
                            uint64_t minimumBytes, std::string_view tooShort) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ES_THROW(InvalidArgument, where, ": argument 'path' = ", name,
             " cannot be opened: ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ES_THROW(InvalidArgument, where, ": argument 'path' = ", name, " is not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < std::max<uint64_t>(minimumBytes, 1)) {
    ::close(fd);
    ES_THROW(FormatError, name, ": file is ", size, " bytes, ", tooShort, " (truncated?)");
  }
  void* mapped = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (mapped == MAP_FAILED) {
    ES_THROW(InvalidArgument, where, ": argument 'path' = ", name,
             " cannot be memory-mapped: ", std::strerror(err));
  }
  MappedFile file;
  file.base_ = static_cast<const uint8_t*>(mapped);
  file.size_ = size;
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
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
