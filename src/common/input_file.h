#pragma once
// The one checked way every loader opens a file it reads (config.json, weights, the shard index,
// tokenizer.json, tokenizer_config.json, GGUF, draft folders, request files):
//   - opened read-only with O_NONBLOCK, so open() never blocks (a FIFO with no writer would
//     block a plain open forever), then the descriptor is fstat'ed: anything but a regular file
//     (directory, FIFO, socket, character or block device) is refused, naming what it is;
//   - a file parsed whole into memory is bounded by a limit its caller passes per kind of file;
//   - reads go through pread, so a file that someone else truncates while it is read gives an
//     error naming the file and the offset instead of a SIGBUS (which reading a truncated
//     memory mapping raises);
//   - every error names the file.
// Errors: InvalidArgument "<where>: argument '<arg>' = <path> ..." for a file that cannot be
// opened, is not a regular file or is over its size limit; FormatError "<path>: ..." for a file
// that is shorter than what is read from it.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace es {

// Per-kind limits on files read whole into memory and parsed. Each is far above the largest real
// file of its kind and far below what would exhaust memory once parsed.
inline constexpr uint64_t kMaxConfigJsonBytes = 16u << 20;           // config.json
inline constexpr uint64_t kMaxWeightsIndexBytes = 64u << 20;         // *.safetensors.index.json
inline constexpr uint64_t kMaxTokenizerJsonBytes = 64u << 20;        // tokenizer.json
inline constexpr uint64_t kMaxTokenizerConfigJsonBytes = 16u << 20;  // tokenizer_config.json
inline constexpr uint64_t kMaxRequestFileBytes = 64u << 20;          // generate --input-file

// What `st_mode` is, in words: "a directory", "a FIFO (named pipe)", "a character device", ...
std::string describeFileType(uint32_t mode);

class InputFile {
 public:
  InputFile() = default;
  // Opens `path` (symbolic links followed) as described above. `where` names the caller and
  // `argument` the argument or flag the path came from ("path", "--input-file", ...).
  static InputFile open(const std::filesystem::path& path, std::string_view where,
                        std::string_view argument = "path");

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // as fstat saw it at open
  const std::filesystem::path& path() const { return path_; }

  // Reads exactly `bytes` bytes at `offset` into `dst`. A file that ends early (it shrank since
  // it was opened) is a FormatError naming the file, the offset and the sizes.
  void readAt(uint64_t offset, void* dst, uint64_t bytes) const;

  // The whole file; InvalidArgument naming the file, its size and `limit` when it is larger.
  std::string readAll(uint64_t limit) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::filesystem::path path_;
  std::string where_;
  std::string argument_;
};

// InputFile::open(path, where, argument).readAll(limit): a whole small file for parsing.
std::string readInputFile(const std::filesystem::path& path, uint64_t limit, std::string_view where,
                          std::string_view argument = "path");

}  // namespace es
