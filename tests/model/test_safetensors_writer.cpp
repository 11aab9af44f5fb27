// The streaming safetensors writer (model/safetensors_writer.h) read back by the hardened reader:
// tensors in pieces, 8-byte aligned data, and every misuse refused without leaving a file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "common/errors.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("es_st_writer_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::span<const uint8_t> bytesOf(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4};
}

TEST_F(SafetensorsWriterTest, PiecesReadBackAligned) {
  const std::vector<float> a = {1, 2, 3}, b = {-1, 0.5f, 7, 8, 9, 10};
  const fs::path path = dir_ / "t.safetensors";
  {
    SafetensorsWriter w(path,
                        {{.name = "z.a", .dtype = "F32", .shape = {3}, .bytes = 12},
                         {.name = "b", .dtype = "F32", .shape = {2, 3}, .bytes = 24}},
                        {{"format", "pt"}}, "test");
    EXPECT_FALSE(fs::exists(path));  // written as path.tmp until finish()
    w.append(bytesOf(a));
    w.append(bytesOf(b).first(10));  // a tensor in two pieces
    w.append(bytesOf(b).subspan(10));
    const uint64_t size = w.finish();
    EXPECT_EQ(size, fs::file_size(path));
  }
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  EXPECT_EQ((f.header().data_offset) % 8, 0u);
  ASSERT_TRUE(f.isAligned("z.a") && f.isAligned("b"));
  EXPECT_EQ(std::memcmp(f.bytes("z.a").data(), a.data(), 12), 0);
  EXPECT_EQ(std::memcmp(f.bytes("b").data(), b.data(), 24), 0);
  EXPECT_EQ(f.info("b").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST_F(SafetensorsWriterTest, MisuseIsRefusedAndLeavesNoFile) {
  const fs::path path = dir_ / "t.safetensors";
  const std::vector<float> v = {1, 2};
  {
    SafetensorsWriter w(path, {{.name = "x", .dtype = "F32", .shape = {1}, .bytes = 4}}, {},
                        "test");
    EXPECT_THROW(w.append(bytesOf(v)), InvalidArgument);  // 8 bytes where 4 are announced
  }
  {
    SafetensorsWriter w(path, {{.name = "x", .dtype = "F32", .shape = {2}, .bytes = 8}}, {},
                        "test");
    w.append(bytesOf(v).first(4));
    EXPECT_THROW(w.finish(), InvalidArgument);  // 4 of 8 bytes
  }
  EXPECT_THROW(SafetensorsWriter(path,
                                 {{.name = "x", .dtype = "F32", .shape = {1}, .bytes = 4},
                                  {.name = "x", .dtype = "F32", .shape = {1}, .bytes = 4}},
                                 {}, "test"),
               InvalidArgument);
  EXPECT_THROW(SafetensorsWriter(dir_ / "missing" / "t.safetensors", {}, {}, "test"),
               InvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace es::model
