#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace es {

std::string describeFileType(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a file";
  }
}

InputFile InputFile::open(const std::filesystem::path& path, std::string_view where,
                          std::string_view argument) {
  const std::string name = path.string();
  // O_NONBLOCK: open() on a FIFO without a writer returns at once instead of waiting for one;
  // for a regular file the flag changes nothing (disk reads do not honour it).
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    ES_THROW(InvalidArgument, where, ": argument '", argument, "' = ", name,
             " cannot be opened: ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    ES_THROW(InvalidArgument, where, ": argument '", argument, "' = ", name,
             " cannot be examined (fstat): ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ES_THROW(InvalidArgument, where, ": argument '", argument, "' = ", name, " is ",
             describeFileType(st.st_mode), ", not a regular file");
  }
  // A regular file: reads block as usual (the flag only mattered for open()).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  InputFile file;
  file.fd_ = fd;
  file.size_ = static_cast<uint64_t>(st.st_size);
  file.path_ = path;
  file.where_ = where;
  file.argument_ = argument;
  return file;
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      where_(std::move(other.where_)),
      argument_(std::move(other.argument_)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    where_ = std::move(other.where_);
    argument_ = std::move(other.argument_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::readAt(uint64_t offset, void* dst, uint64_t bytes) const {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, out + done, static_cast<size_t>(bytes - done),
                                static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ES_THROW(FormatError, path_.string(), ": read of ", bytes, " bytes at offset ", offset,
               " failed: ", std::strerror(err));
    }
    if (got == 0) {
      struct stat st {};
      const std::string now = ::fstat(fd_, &st) == 0
                                  ? std::to_string(static_cast<uint64_t>(st.st_size)) + " bytes"
                                  : std::string("of unknown size");
      ES_THROW(FormatError, path_.string(), ": read of ", bytes, " bytes at offset ", offset,
               " came up short at byte ", offset + done, ": the file is now ", now, " (", size_,
               " when opened; truncated while loading?)");
    }
    done += static_cast<uint64_t>(got);
  }
}

std::string InputFile::readAll(uint64_t limit) const {
  if (size_ > limit) {
    ES_THROW(InvalidArgument, where_, ": argument '", argument_, "' = ", path_.string(), " is ",
             size_, " bytes, over the limit of ", limit, " bytes");
  }
  std::string text(static_cast<size_t>(size_), '\0');
  readAt(0, text.data(), size_);
  return text;
}

std::string readInputFile(const std::filesystem::path& path, uint64_t limit, std::string_view where,
                          std::string_view argument) {
  return InputFile::open(path, where, argument).readAll(limit);
}

}  // namespace es
