// GGUF reader: hand-made files parse to the right metadata and tensor infos; malformed variants
// are FormatErrors that say what is wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf.h"
#include "model/gguf_test_writer.h"
#include "model/safetensors_test_writer.h"

namespace es::model {
namespace {

using test::GgufTestTensor;
using test::GgufTestWriter;

GgufTestWriter smallFile() {
  GgufTestWriter w;
  w.kvString("general.architecture", "llama");
  w.kvU32("llama.block_count", 2);
  w.kvF32("llama.rope.freq_base", 100000.0f);
  w.kvBool("tokenizer.ggml.add_bos_token", false);
  w.kvI32("some.signed", -7);
  w.kvU64("some.u64", 123456789012345ull);
  w.kvStringArray("tokenizer.ggml.tokens", {"a", "b", "Ġc"});
  w.kvI32Array("tokenizer.ggml.token_type", {1, 3, 1});
  w.tensor(
      {"token_embd.weight", {4, 3}, 0, test::f32Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), {}});
  w.tensor({"output_norm.weight", {4}, 0, test::f32Bytes({1, 1, 1, 1}), {}});
  std::vector<uint8_t> q(20, 0x11);
  w.tensor({"blk.0.attn_q.weight", {32, 1}, 3, q, {}});  // Q4_1: one block
  return w;
}

GgufHeader parse(const std::vector<uint8_t>& bytes) {
  return parseGgufHeader(std::span<const uint8_t>(bytes.data(), bytes.size()), "test.gguf");
}

// Expects a FormatError whose message contains every fragment.
void expectFormatError(const std::vector<uint8_t>& bytes,
                       std::initializer_list<std::string> fragments) {
  try {
    parse(bytes);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
    for (const std::string& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

TEST(Gguf, ParsesMetadataAndTensors) {
  const auto bytes = smallFile().build();
  const GgufHeader h = parse(bytes);
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.data_offset % 32, 0u);
  EXPECT_EQ(h.getString("general.architecture"), "llama");
  EXPECT_EQ(h.getInt("llama.block_count", 1, 100), 2);
  EXPECT_EQ(h.getInt("some.signed", -10, 10), -7);
  EXPECT_EQ(h.getInt("some.u64", 0, INT64_MAX), 123456789012345ll);
  EXPECT_FLOAT_EQ(h.getFloat("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(h.optBool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(h.getStringArray("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "Ġc"}));
  EXPECT_EQ(h.getIntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_FALSE(h.optString("absent").has_value());

  ASSERT_EQ(h.tensors.size(), 3u);
  const GgufTensorInfo* e = h.findTensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->rowMajorShape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(e->bytes, 48u);
  EXPECT_EQ(e->numel, 12u);
  const GgufTensorInfo* q = h.findTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ggmlType(), GgmlType::kQ4_1);
  EXPECT_EQ(q->bytes, 20u);
  EXPECT_EQ(q->offset % 32, 0u);
  EXPECT_EQ(h.findTensor("nope"), nullptr);
  EXPECT_NE(e->describe().find("F32 (4, 3)"), std::string::npos) << e->describe();
}

TEST(Gguf, TypedGetterErrorsNameKeyAndType) {
  const auto bytes = smallFile().build();
  const GgufHeader h = parse(bytes);
  try {
    h.getString("llama.block_count");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'llama.block_count' has type u32, expected string"),
              std::string::npos)
        << e.what();
  }
  try {
    h.getInt("missing.key", 0, 1);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'missing.key' is missing"), std::string::npos)
        << e.what();
  }
  try {
    h.getInt("llama.block_count", 3, 10);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("must be in [3, 10]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h.getStringArray("tokenizer.ggml.token_type"), FormatError);
  EXPECT_THROW(h.getFloat("general.architecture"), FormatError);
}

TEST(Gguf, AcceptsVersion2AndCustomAlignment) {
  GgufTestWriter w = smallFile();
  w.version = 2;
  w.alignment = 64;
  w.kvU32("general.alignment", 64);
  const auto bytes = w.build();
  const GgufHeader h = parse(bytes);
  EXPECT_EQ(h.version, 2u);
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  for (const auto& t : h.tensors) EXPECT_EQ(t.offset % 64, 0u);
}

TEST(Gguf, NoTensors) {
  GgufTestWriter w;
  w.kvString("general.architecture", "llama");
  const auto bytes = w.build();
  EXPECT_TRUE(parse(bytes).tensors.empty());
}

TEST(Gguf, BadMagicAndVersion) {
  GgufTestWriter w = smallFile();
  w.magic = "GGUG";
  expectFormatError(w.build(), {"bad magic", "not a GGUF file"});
  expectFormatError({'G', 'G'}, {"bad magic"});
  GgufTestWriter v = smallFile();
  v.version = 1;
  expectFormatError(v.build(), {"version 1", "not supported"});
  v.version = 0x03000000;  // 3 byte-swapped
  expectFormatError(v.build(), {"big-endian"});
}

TEST(Gguf, TruncatedAnywhere) {
  const auto full = smallFile().build();
  const GgufHeader h = parse(full);
  // Every cut inside the header or the data is a FormatError (never a crash or a read past the
  // buffer; ASan runs of this test would see one). Cuts in the final padding are harmless.
  const uint64_t last_end = [&] {
    uint64_t end = 0;
    for (const auto& t : h.tensors) end = std::max(end, h.data_offset + t.offset + t.bytes);
    return end;
  }();
  for (size_t n = 0; n < last_end; ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse(cut), FormatError) << "cut at " << n;
  }
}

TEST(Gguf, TensorPastTheEnd) {
  GgufTestWriter w = smallFile();
  w.tensors()[2].offset = 4096;
  auto bytes = w.build();
  bytes.resize(bytes.size() - 32);  // drop the tail that holds it
  expectFormatError(bytes, {"'blk.0.attn_q.weight'", "past the end"});
}

TEST(Gguf, OverlappingTensors) {
  GgufTestWriter w = smallFile();
  w.tensors()[1].offset = 32;  // token_embd is [0, 48)
  expectFormatError(w.build(), {"overlap", "'token_embd.weight'", "'output_norm.weight'"});
}

TEST(Gguf, MisalignedOffset) {
  GgufTestWriter w = smallFile();
  w.tensors()[2].offset = 100;
  expectFormatError(w.build(), {"offset 100", "not a multiple of the alignment 32"});
}

TEST(Gguf, DimsOverflowAndRank) {
  GgufTestWriter w = smallFile();
  w.tensors()[0].dims = {1ull << 40, 1ull << 40};
  expectFormatError(w.build(), {"'token_embd.weight'", "overflows"});
  GgufTestWriter big = smallFile();
  big.tensors()[0].dims = {1ull << 63, 1};
  expectFormatError(big.build(), {"must be < 2^63"});
  GgufTestWriter rank = smallFile();
  rank.tensors()[1].dims = {1, 1, 1, 1, 4};
  expectFormatError(rank.build(), {"n_dims = 5"});
  GgufTestWriter zero = smallFile();
  zero.tensors()[1].dims = {};
  expectFormatError(zero.build(), {"n_dims = 0"});
  GgufTestWriter block = smallFile();
  block.tensors()[2].dims = {16, 2};  // Q4_1 rows must be whole blocks
  expectFormatError(block.build(), {"not a multiple of the Q4_1 block size 32"});
}

TEST(Gguf, UnknownTensorType) {
  GgufTestWriter w = smallFile();
  w.tensors()[1].type = 99;
  expectFormatError(w.build(), {"unknown ggml tensor type 99", "'output_norm.weight'"});
}

TEST(Gguf, DuplicateNamesAndKeys) {
  GgufTestWriter w = smallFile();
  w.tensors()[1].name = "token_embd.weight";
  expectFormatError(w.build(), {"duplicate tensor 'token_embd.weight'"});
  GgufTestWriter k = smallFile();
  k.kvU32("llama.block_count", 3);
  expectFormatError(k.build(), {"duplicate metadata key 'llama.block_count'"});
}

TEST(Gguf, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 30}) {
    GgufTestWriter w = smallFile();
    w.kvU32("general.alignment", a);
    expectFormatError(w.build(), {"general.alignment", "power of two"});
  }
  GgufTestWriter s = smallFile();
  s.kvString("general.alignment", "32");
  expectFormatError(s.build(), {"general.alignment"});
}

TEST(Gguf, HugeLengthsAndCounts) {
  {  // string length far beyond the file
    GgufTestWriter w;
    std::vector<uint8_t> v;
    test::putU64(v, 1ull << 62);
    w.kvRaw("general.name", test::kGString, v);
    expectFormatError(w.build(), {"'general.name'", "exceeds the limit"});
  }
  {  // array count that cannot fit
    GgufTestWriter w;
    std::vector<uint8_t> v;
    test::putU32(v, test::kGU32);
    test::putU64(v, 1ull << 60);
    w.kvRaw("tokenizer.ggml.token_type", test::kGArray, v);
    expectFormatError(w.build(), {"'tokenizer.ggml.token_type'", "count"});
  }
  {  // key length above the limit
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
    test::putU32(b, 3);
    test::putU64(b, 0);
    test::putU64(b, 1);
    test::putU64(b, kGgufMaxKeyBytes + 1);
    b.resize(b.size() + 100, 'k');
    expectFormatError(b, {"length", "exceeds the limit"});
  }
  GgufTestWriter c = smallFile();
  c.tensor_count_override = 1ull << 58;
  expectFormatError(c.build(), {"tensor count"});
  GgufTestWriter k = smallFile();
  k.kv_count_override = 1ull << 58;
  expectFormatError(k.build(), {"metadata count"});
}

TEST(Gguf, DeepAndNestedArrays) {
  // array[array[u8]] with two inner arrays parses.
  {
    GgufTestWriter w;
    std::vector<uint8_t> v;
    test::putU32(v, test::kGArray);
    test::putU64(v, 2);
    for (int i = 0; i < 2; ++i) {
      test::putU32(v, test::kGU8);
      test::putU64(v, 3);
      v.insert(v.end(), {1, 2, 3});
    }
    w.kvRaw("nested", test::kGArray, v);
    const auto bytes = w.build();
    const GgufHeader h = parse(bytes);
    const GgufValue* n = h.find("nested");
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->arrays.size(), 2u);
    int64_t x = 0;
    EXPECT_TRUE(n->arrays[1].intElement(2, &x));
    EXPECT_EQ(x, 3);
    EXPECT_EQ(n->describeType(), "array[array]");
  }
  // Nesting deeper than the limit is an error, not a stack overflow.
  GgufTestWriter w;
  std::vector<uint8_t> v;
  for (int i = 0; i < 100000; ++i) {
    test::putU32(v, test::kGArray);
    test::putU64(v, 1);
  }
  w.kvRaw("deep", test::kGArray, v);
  expectFormatError(w.build(), {"'deep'", "deeper than the limit"});
}

TEST(Gguf, BadValueTypesAndBools) {
  GgufTestWriter w;
  w.kvRaw("weird", 13, {0});
  expectFormatError(w.build(), {"'weird'", "unknown value type 13"});
  GgufTestWriter b;
  b.kvRaw("flag", test::kGBool, {2});
  expectFormatError(b.build(), {"'flag'", "bool value 2"});
  GgufTestWriter e;
  e.kvString("", "x");
  expectFormatError(e.build(), {"is empty"});
  GgufTestWriter n = smallFile();
  n.tensors()[0].name = "";
  expectFormatError(n.build(), {"empty name"});
}

TEST(Gguf, FileOpenAndBytes) {
  test::TempDir dir;
  const auto bytes = smallFile().build();
  test::writeBytes(dir / "m.gguf", bytes);
  const GgufFile f = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(f.fileBytes(), bytes.size());
  const auto span = f.bytes("output_norm.weight");
  ASSERT_EQ(span.size(), 16u);
  float one = 0;
  std::memcpy(&one, span.data(), 4);
  EXPECT_EQ(one, 1.0f);
  EXPECT_THROW(f.info("absent"), InvalidArgument);
  EXPECT_THROW(GgufFile::open(dir / "missing.gguf"), InvalidArgument);
  EXPECT_THROW(GgufFile::open(dir.path()), InvalidArgument);
  test::writeBytes(dir / "short.gguf", {'G', 'G', 'U', 'F'});
  EXPECT_THROW(GgufFile::open(dir / "short.gguf"), FormatError);
  GgufFile moved = GgufFile::open(dir / "m.gguf");
  GgufFile other = std::move(moved);
  EXPECT_EQ(other.tensors().size(), 3u);
}

}  // namespace
}  // namespace es::model
