// Every loader opens its files through InputFile (common/input_file.h): special files (FIFO,
// directory, character device) are refused naming the file and what it is, without blocking;
// files parsed whole are bounded by their kind's limit; tensor data is read with pread, so a
// weights file truncated after it was opened is an error naming the file and the offset (never
// a SIGBUS); names echoed from a file have their control bytes escaped.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/input_file.h"
#include "model/gguf.h"
#include "model/gguf_dequant.h"
#include "model/gguf_test_writer.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/safetensors_test_writer.h"
#include "model/weight_store.h"
#include "model/weight_upload.h"
#include "ops/backend.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer_json.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Kills the test binary (default SIGALRM action) if the guarded code blocks: a hang in open()
// on a FIFO is then a failure with a clear signal instead of a CI timeout.
class HangGuard {
 public:
  HangGuard() { ::alarm(20); }
  ~HangGuard() { ::alarm(0); }
};

void makeFifo(const fs::path& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path; }

// Runs f, expects an exception of type E whose message contains every fragment.
template <typename E, typename F>
void expectError(F&& f, std::initializer_list<std::string> fragments) {
  HangGuard guard;
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& fragment : fragments)
      EXPECT_NE(msg.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << msg;
  }
}

TEST(InputFile, ReadsARegularFileWhole) {
  TempDir dir;
  test::writeText(dir / "a.json", "{\"x\": 1}");
  EXPECT_EQ(readInputFile(dir / "a.json", 100, "test"), "{\"x\": 1}");
  const InputFile f = InputFile::open(dir / "a.json", "test");
  EXPECT_EQ(f.size(), 8u);
  char buf[3] = {};
  f.readAt(1, buf, 3);
  EXPECT_EQ(std::string(buf, 3), "\"x\"");
}

TEST(InputFile, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  makeFifo(dir / "pipe");
  expectError<InvalidArgument>([&] { InputFile::open(dir / "pipe", "test", "--input-file"); },
                               {"test: argument '--input-file' = ", (dir / "pipe").string(),
                                "is a FIFO (named pipe), not a regular file"});
}

TEST(InputFile, DirectoryAndDeviceAreNamed) {
  TempDir dir;
  expectError<InvalidArgument>([&] { readInputFile(dir.path(), 100, "test"); },
                               {dir.path().string(), "is a directory, not a regular file"});
  expectError<InvalidArgument>([&] { readInputFile("/dev/null", 100, "test"); },
                               {"/dev/null", "is a character device, not a regular file"});
  expectError<InvalidArgument>([&] { readInputFile(dir / "absent", 100, "test"); },
                               {(dir / "absent").string(), "cannot be opened"});
}

TEST(InputFile, OverTheLimitNamesSizeAndLimit) {
  TempDir dir;
  test::writeText(dir / "big", "0123456789");
  expectError<InvalidArgument>([&] { readInputFile(dir / "big", 9, "test"); },
                               {(dir / "big").string(), "is 10 bytes, over the limit of 9 bytes"});
}

TEST(InputFile, ShortReadNamesFileAndOffset) {
  TempDir dir;
  test::writeText(dir / "f", "abcd");
  const InputFile f = InputFile::open(dir / "f", "test");
  char buf[8];
  expectError<FormatError>(
      [&] { f.readAt(2, buf, 4); },
      {(dir / "f").string(), "read of 4 bytes at offset 2 came up short at byte 4",
       "the file is now 4 bytes (4 when opened"});
}

TEST(LoaderFiles, FifoConfigJsonSaysItIsNotARegularFile) {
  TempDir dir;
  makeFifo(dir / "config.json");
  expectError<InvalidArgument>(
      [&] { loadModelConfig(dir.path()); },
      {(dir / "config.json").string(), "is a FIFO (named pipe)", "not a regular file"});
}

TEST(LoaderFiles, MissingConfigJsonIsStillNamed) {
  TempDir dir;
  expectError<InvalidArgument>([&] { loadModelConfig(dir.path()); }, {"has no config.json"});
}

TEST(LoaderFiles, OversizedConfigJson) {
  TempDir dir;
  test::writeText(dir / "config.json", "{}");
  fs::resize_file(dir / "config.json", kMaxConfigJsonBytes + 1);  // sparse: no disk used
  expectError<InvalidArgument>(
      [&] { loadModelConfig(dir.path()); },
      {(dir / "config.json").string(), std::to_string(kMaxConfigJsonBytes + 1) + " bytes",
       "over the limit of " + std::to_string(kMaxConfigJsonBytes) + " bytes"});
}

TEST(LoaderFiles, FifoWeightsAreRefusedWithoutBlocking) {
  TempDir dir;
  makeFifo(dir / "model.safetensors");
  expectError<InvalidArgument>([&] { WeightStore::openFolder(dir.path()); },
                               {(dir / "model.safetensors").string(), "is a FIFO (named pipe)"});
  expectError<InvalidArgument>([&] { WeightStore::open(dir / "model.safetensors"); },
                               {(dir / "model.safetensors").string(), "is a FIFO (named pipe)"});
  makeFifo(dir / "m.gguf");
  expectError<InvalidArgument>([&] { GgufFile::open(dir / "m.gguf"); },
                               {(dir / "m.gguf").string(), "is a FIFO (named pipe)"});
}

TEST(LoaderFiles, FifoShardAndIndex) {
  TempDir dir;
  test::writeText(dir / "model.safetensors.index.json",
                  R"({"weight_map": {"w": "part-1.safetensors"}})");
  makeFifo(dir / "part-1.safetensors");
  expectError<InvalidArgument>([&] { WeightStore::openFolder(dir.path()); },
                               {(dir / "part-1.safetensors").string(), "is a FIFO (named pipe)"});
  TempDir other;
  makeFifo(other / "model.safetensors.index.json");
  expectError<InvalidArgument>(
      [&] { WeightStore::openFolder(other.path()); },
      {(other / "model.safetensors.index.json").string(), "is a FIFO (named pipe)"});
}

TEST(LoaderFiles, DirectoryInsteadOfWeights) {
  TempDir dir;
  fs::create_directory(dir / "model.safetensors");
  expectError<InvalidArgument>([&] { WeightStore::openFolder(dir.path()); },
                               {(dir / "model.safetensors").string(), "is a directory"});
}

TEST(LoaderFiles, FifoTokenizerJsonIsRefusedWithoutBlocking) {
  TempDir dir;
  makeFifo(dir / "tokenizer.json");
  expectError<InvalidArgument>([&] { tokenizer::loadTokenizerJson(dir / "tokenizer.json"); },
                               {(dir / "tokenizer.json").string(), "is a FIFO (named pipe)"});
}

TEST(LoaderFiles, FifoTokenizerConfigIsRefusedNotSkipped) {
  TempDir dir;
  fs::create_symlink(fs::path(test::test_data_dir()) / "tokenizer/qwen3/tokenizer.json",
                     dir / "tokenizer.json");
  makeFifo(dir / "tokenizer_config.json");
  expectError<InvalidArgument>(
      [&] { tokenizer::loadTokenizerJson(dir / "tokenizer.json"); },
      {(dir / "tokenizer_config.json").string(), "is a FIFO (named pipe)"});
}

TEST(LoaderFiles, DirectoryAsTokenizerJson) {
  TempDir dir;
  fs::create_directory(dir / "tokenizer.json");
  expectError<InvalidArgument>([&] { tokenizer::loadTokenizerJson(dir / "tokenizer.json"); },
                               {(dir / "tokenizer.json").string(), "is a directory"});
}

TEST(LoaderFiles, OversizedTokenizerJsonNamesSizeAndLimit) {
  TempDir dir;
  test::writeText(dir / "tokenizer.json", "{}");
  const uint64_t size = uint64_t{1} << 40;  // 1 TiB, sparse: no disk used
  fs::resize_file(dir / "tokenizer.json", size);
  expectError<InvalidArgument>(
      [&] { tokenizer::loadTokenizerJson(dir / "tokenizer.json"); },
      {(dir / "tokenizer.json").string(), "is " + std::to_string(size) + " bytes",
       "over the limit of " + std::to_string(kMaxTokenizerJsonBytes) + " bytes"});
}

TEST(LoaderFiles, DevZeroLinkedAsTokenizerJson) {
  TempDir dir;
  fs::create_symlink("/dev/zero", dir / "tokenizer.json");
  expectError<InvalidArgument>(
      [&] { tokenizer::loadTokenizerJson(dir / "tokenizer.json"); },
      {(dir / "tokenizer.json").string(), "is a character device, not a regular file"});
}

// The file is cut short after the header was parsed (as when someone truncates it while the
// model loads): the upload reads with pread and reports the file and the offset.
TEST(LoaderFiles, WeightsTruncatedWhileLoadingAreAnErrorNotSigbus) {
  TempDir dir;
  const fs::path path = dir / "model.safetensors";
  test::writeBytes(path, test::makeSafetensors({test::fakeTensor("a", "F32", {64, 64}),
                                                test::fakeTensor("b", "BF16", {64, 64})}));
  const WeightStore store = WeightStore::open(path);
  const uint64_t dataOffset = store.fileOf("a").header().data_offset;
  fs::resize_file(path, dataOffset + 100);  // inside tensor "a"
  auto backend = ops::makeCpuBackend();
  std::vector<float> out(64 * 64);
  // Same dtype (f32 on the CPU backend: read straight into the destination).
  expectError<FormatError>([&] { uploadTensor(*backend, store, "a", DType::kF32, out.data()); },
                           {path.string(), "at offset " + std::to_string(dataOffset),
                            "came up short at byte " + std::to_string(dataOffset + 100),
                            "the file is now " + std::to_string(dataOffset + 100) + " bytes",
                            "truncated while loading?"});
  // Converted (bf16 -> f32 through a staging chunk).
  expectError<FormatError>([&] { uploadTensor(*backend, store, "b", DType::kF32, out.data()); },
                           {path.string(), "came up short", "truncated while loading?"});
}

// SafetensorsFile::open parses a pread copy of the length field and header, not the mapping.
TEST(LoaderFiles, SafetensorsHeaderParsesFromItsPrefix) {
  const std::vector<uint8_t> bytes = test::makeSafetensors(
      {test::fakeTensor("a", "F32", {8}), test::fakeTensor("b", "BF16", {4})});
  const SafetensorsHeader whole = parseSafetensorsHeader(bytes, "m");
  const std::span<const uint8_t> prefix(bytes.data(), 8 + whole.header_bytes);
  const SafetensorsHeader fromPrefix = parseSafetensorsHeader(prefix, bytes.size(), "m");
  EXPECT_EQ(fromPrefix.data_offset, whole.data_offset);
  EXPECT_EQ(fromPrefix.data_bytes, whole.data_bytes);
  ASSERT_EQ(fromPrefix.tensors.size(), 2u);
  EXPECT_EQ(fromPrefix.tensors[1].end, whole.tensors[1].end);
  test::expectInvalidArgument(
      [&] { parseSafetensorsHeader(prefix.first(prefix.size() - 1), bytes.size(), "m"); },
      "prefix.size()");
}

// GgufFile::open parses a pread copy that grows as the parser asks; growing from a few bytes
// one request at a time gives the same header as parsing the whole buffer.
TEST(LoaderFiles, GgufHeaderParsesFromAGrowingPrefix) {
  test::GgufTestWriter w;
  w.kvString("general.name", "growing");
  w.kvStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.tensor({"t", {4}, 0, std::vector<uint8_t>(16, 0), {}});
  w.tensor({"u", {8}, 0, std::vector<uint8_t>(32, 0), {}});
  const std::vector<uint8_t> bytes = w.build();
  const GgufHeader whole = parseGgufHeader(bytes, "m.gguf");
  size_t calls = 0;
  const GgufBytesSource more = [&](uint64_t needed) {
    ++calls;
    return std::span<const uint8_t>(bytes.data(), static_cast<size_t>(needed));
  };
  const GgufHeader grown =
      parseGgufHeader(std::span<const uint8_t>(bytes.data(), 4), bytes.size(), more, "m.gguf");
  EXPECT_GT(calls, 5u);
  EXPECT_EQ(grown.data_offset, whole.data_offset);
  EXPECT_EQ(grown.getString("general.name"), "growing");
  EXPECT_EQ(grown.getStringArray("tokenizer.ggml.tokens").size(), 3u);
  ASSERT_EQ(grown.tensors.size(), 2u);
  EXPECT_EQ(grown.tensors[1].offset, whole.tensors[1].offset);
}

TEST(LoaderFiles, GgufTruncatedWhileLoadingIsAnError) {
  TempDir dir;
  test::GgufTestWriter w;
  w.tensor({"t", {64}, 0, std::vector<uint8_t>(256, 0), {}});
  test::writeBytes(dir / "m.gguf", w.build());
  const GgufFile file = GgufFile::open(dir / "m.gguf");
  fs::resize_file(dir / "m.gguf", file.header().data_offset + 10);
  expectError<FormatError>([&] { dequantizeTensor(file, file.info("t")); },
                           {(dir / "m.gguf").string(), "came up short", "at offset"});
}

TEST(EscapeControl, WritesControlBytesAsEscapes) {
  EXPECT_EQ(escapeControl(std::string("a\0b\nc\td\x7f\x1b\\", 10)),
            "a\\x00b\\nc\\td\\x7f\\x1b\\\\");
  EXPECT_EQ(escapeControl("plain \xc3\xa9"), "plain \xc3\xa9");  // UTF-8 passes through
  EXPECT_EQ(quoteShort(std::string("x\0y", 3)), "'x\\x00y'");
}

// A GGUF tensor name with NUL and newlines is echoed escaped and whole: the message goes on
// past the name, on one line.
TEST(EscapeControl, GgufTensorNameWithControlBytes) {
  const std::string name("bad\0name\nwith\rcontrol", 21);
  test::GgufTestWriter w;
  w.tensor({name, {4}, 0, std::vector<uint8_t>(16, 0), {}});
  w.tensor({name, {4}, 0, std::vector<uint8_t>(16, 0), {}});
  const std::vector<uint8_t> bytes = w.build();
  try {
    parseGgufHeader(std::span<const uint8_t>(bytes.data(), bytes.size()), "x.gguf");
    ADD_FAILURE() << "expected a FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();  // as a C string: cut at the first NUL, if any
    EXPECT_EQ(msg.size(), std::strlen(e.what()));
    EXPECT_NE(msg.find("duplicate tensor 'bad\\x00name\\nwith\\rcontrol'"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(EscapeControl, TensorDescriptionsEscapeNames) {
  GgufTensorInfo g;
  g.name = std::string("blk\0.x\n", 7);
  g.dims = {4};
  EXPECT_EQ(g.describe().rfind("blk\\x00.x\\n ", 0), 0u) << g.describe();
  TensorInfo t;
  t.name = "w\x1b[31m";
  EXPECT_EQ(t.describe().rfind("w\\x1b[31m ", 0), 0u) << t.describe();
}

}  // namespace
}  // namespace es::model
