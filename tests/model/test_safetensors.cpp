// Safetensors reader and model-folder weight store: well-formed files read back byte-exact, and
// every malformed variant is a FormatError that names the problem (never a crash).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/safetensors.h"
#include "model/safetensors_test_writer.h"
#include "model/weight_store.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using test::FakeTensor;
using test::TempDir;

std::vector<uint8_t> floatBytes(std::initializer_list<float> values) {
  std::vector<uint8_t> out(values.size() * 4);
  size_t i = 0;
  for (float v : values) std::memcpy(out.data() + 4 * i++, &v, 4);
  return out;
}

std::vector<uint8_t> u16Bytes(std::initializer_list<uint16_t> values) {
  std::vector<uint8_t> out;
  for (uint16_t v : values) {
    out.push_back(static_cast<uint8_t>(v & 0xff));
    out.push_back(static_cast<uint8_t>(v >> 8));
  }
  return out;
}

// Expects a FormatError whose message contains every one of `parts`.
template <typename F>
void expectFormatError(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "missing '" << part << "' in: " << message;
    }
  }
}

SafetensorsHeader parseBytes(const std::vector<uint8_t>& bytes) {
  return parseSafetensorsHeader(std::span<const uint8_t>(bytes.data(), bytes.size()),
                                "t.safetensors");
}

// Header text + `data_bytes` zero bytes of data.
std::vector<uint8_t> rawFile(const std::string& header, size_t data_bytes) {
  return test::assembleSafetensors(header, std::vector<uint8_t>(data_bytes, 0));
}

std::vector<FakeTensor> twoTensors() {
  FakeTensor a{"a.weight", "F32", {2, 3}, floatBytes({1.5f, -2.0f, 0.25f, 3.0f, 4.0f, -0.5f})};
  FakeTensor b{"b.bias", "BF16", {4}, u16Bytes({0x3F80, 0xC000, 0x0000, 0x4040})};  // 1, -2, 0, 3
  return {a, b};
}

TEST(Safetensors, ReadsWellFormedFileByteExact) {
  TempDir dir;
  test::writeBytes(dir / "m.safetensors",
                   test::makeSafetensors(twoTensors(), R"({"format":"pt","n":"2"})"));
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");

  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  const TensorInfo& a = f.info("a.weight");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(a.end, 24u);
  const TensorInfo& b = f.info("b.bias");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.begin, 24u);
  EXPECT_EQ(b.end, 32u);

  TensorView va = f.view("a.weight");
  EXPECT_EQ(va.rank, 2);
  EXPECT_EQ(va.dim(0), 2);
  EXPECT_EQ(va.dim(1), 3);
  EXPECT_EQ(va.space, MemorySpace::kHost);
  EXPECT_TRUE(f.isAligned("a.weight"));
  const float* pa = va.as<float>();
  EXPECT_EQ(pa[0], 1.5f);
  EXPECT_EQ(pa[1], -2.0f);
  EXPECT_EQ(pa[5], -0.5f);

  TensorView vb = f.view("b.bias");
  const bf16* pb = vb.as<bf16>();
  EXPECT_EQ(to_float(pb[0]), 1.0f);
  EXPECT_EQ(to_float(pb[1]), -2.0f);
  EXPECT_EQ(to_float(pb[3]), 3.0f);
  EXPECT_EQ(f.bytes("b.bias").size(), 8u);

  // The header's data section starts at 8 + N where N is a multiple of 8 (padding).
  EXPECT_EQ(f.header().data_offset % 8, 0u);
  EXPECT_EQ(f.fileBytes(), f.header().data_offset + 32);
}

TEST(Safetensors, MoveKeepsMappingAlive) {
  TempDir dir;
  test::writeBytes(dir / "m.safetensors", test::makeSafetensors(twoTensors()));
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  const float* before = f.view("a.weight").as<float>();
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(g.view("a.weight").as<float>(), before);
  EXPECT_EQ(g.view("a.weight").as<float>()[0], 1.5f);
  SafetensorsFile h = SafetensorsFile::open(dir / "m.safetensors");
  h = std::move(g);  // h's own mapping is released, g's taken over
  EXPECT_EQ(h.view("a.weight").as<float>()[3], 3.0f);
}

TEST(Safetensors, ScalarEmptyAndF16TensorsAndNoMetadata) {
  FakeTensor scalar{"s", "F32", {}, floatBytes({7.0f})};
  FakeTensor empty{"e", "F16", {0, 4}, {}};
  FakeTensor half{"h", "F16", {2}, u16Bytes({0x3C00, 0xC400})};  // 1, -4
  auto bytes = test::makeSafetensors({scalar, empty, half});
  SafetensorsHeader h = parseBytes(bytes);
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.find("s")->numel(), 1);
  EXPECT_EQ(h.find("e")->numel(), 0);
  EXPECT_EQ(h.find("e")->byteSize(), 0u);
  EXPECT_EQ(h.find("h")->dtype, DType::kF16);
  EXPECT_EQ(h.find("missing"), nullptr);

  TempDir dir;
  test::writeBytes(dir / "x.safetensors", bytes);
  SafetensorsFile f = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(f.view("s").rank, 0);
  EXPECT_EQ(f.view("s").as<float>()[0], 7.0f);
  EXPECT_EQ(to_float(f.view("h").as<fp16>()[1]), -4.0f);
}

TEST(Safetensors, AcceptsNulPaddingAndGapsBetweenTensors) {
  // Tensor at [8, 16) leaves a gap [0, 8): allowed (aligned writers do this).
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  header.append(4, '\0');
  auto bytes = test::assembleSafetensors(header, std::vector<uint8_t>(16, 0), /*pad=*/false);
  SafetensorsHeader h = parseBytes(bytes);
  EXPECT_EQ(h.find("x")->begin, 8u);
  EXPECT_EQ(h.header_bytes, header.size());
}

TEST(Safetensors, UnpaddedHeaderIsReadableButReportedUnaligned) {
  // Header of odd length: the data section starts at an odd address.
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  if (header.size() % 2 == 0) header += ' ';
  TempDir dir;
  test::writeBytes(dir / "u.safetensors",
                   test::assembleSafetensors(header, floatBytes({2.5f}), false));
  SafetensorsFile f = SafetensorsFile::open(dir / "u.safetensors");
  EXPECT_FALSE(f.isAligned("x"));
  float v = 0;
  std::memcpy(&v, f.bytes("x").data(), 4);
  EXPECT_EQ(v, 2.5f);
}

TEST(Safetensors, MissingNameAndBadPathAreInvalidArgument) {
  TempDir dir;
  test::writeBytes(dir / "m.safetensors", test::makeSafetensors(twoTensors()));
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  test::expectInvalidArgument([&] { f.info("nope"); }, "name");
  test::expectInvalidArgument([&] { f.view("nope"); }, "name");
  test::expectInvalidArgument([&] { SafetensorsFile::open(dir / "absent.safetensors"); }, "path");
  test::expectInvalidArgument([&] { SafetensorsFile::open(dir.path()); }, "path");
}

// ---- malformed files ----------------------------------------------------------------------

TEST(SafetensorsMalformed, TooShortForLengthField) {
  expectFormatError([] { parseBytes({}); }, {"t.safetensors", "0 bytes", "too short"});
  expectFormatError([] { parseBytes({1, 2, 3, 4, 5}); }, {"5 bytes"});
  TempDir dir;
  test::writeBytes(dir / "short.safetensors", {1, 0, 0});
  expectFormatError([&] { SafetensorsFile::open(dir / "short.safetensors"); },
                    {"short.safetensors", "3 bytes", "too short"});
  test::writeBytes(dir / "empty.safetensors", {});
  expectFormatError([&] { SafetensorsFile::open(dir / "empty.safetensors"); }, {"0 bytes"});
}

TEST(SafetensorsMalformed, TruncatedFile) {
  auto bytes = test::makeSafetensors(twoTensors());
  // Cut into the data section: the last tensor's end (32) is past the remaining 30 bytes.
  auto cut = bytes;
  cut.resize(bytes.size() - 2);
  expectFormatError([&] { parseBytes(cut); },
                    {"'b.bias'", "end 32", "past the data section (30 bytes)"});
  // Cut into the header: the header length points past the end of the file.
  cut.resize(20);
  expectFormatError([&] { parseBytes(cut); }, {"header length", "past the end", "12 bytes"});
  TempDir dir;
  test::writeBytes(dir / "trunc.safetensors", cut);
  expectFormatError([&] { SafetensorsFile::open(dir / "trunc.safetensors"); },
                    {"trunc.safetensors"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOrHuge) {
  std::vector<uint8_t> bytes(8 + 10, ' ');
  bytes[0] = 11;  // 11 > 10 available
  for (int i = 1; i < 8; ++i) bytes[static_cast<size_t>(i)] = 0;
  expectFormatError([&] { parseBytes(bytes); }, {"header length 11", "past the end", "10 bytes"});

  std::vector<uint8_t> huge(64, 0);
  huge[5] = 1;  // 2^40
  expectFormatError([&] { parseBytes(huge); },
                    {"header length 1099511627776", "exceeds the limit 100000000"});
  std::vector<uint8_t> all_ones(16, 0xff);  // 2^64 - 1: must not wrap in the bounds arithmetic
  expectFormatError([&] { parseBytes(all_ones); }, {"header length 18446744073709551615"});
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  expectFormatError([] { parseBytes(rawFile("{not json}", 0)); }, {"invalid JSON"});
  expectFormatError([] { parseBytes(rawFile("[1,2,3]", 0)); }, {"does not start with '{'"});
  expectFormatError([] { parseBytes(rawFile("        ", 0)); }, {"does not start with '{'"});
  expectFormatError([] { parseBytes(rawFile(R"({"a":1} trailing)", 0)); }, {"invalid JSON"});
  expectFormatError([] { parseBytes(rawFile("{\"a\xff\":1}", 0)); },
                    {"invalid JSON"});  // bad UTF-8
  // Zero-length header.
  std::vector<uint8_t> zero(8, 0);
  expectFormatError([&] { parseBytes(zero); }, {"header length 0"});
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expectFormatError([&] { parseBytes(rawFile(header, 20)); },
                    {"'a' [0, 16)", "'b' [12, 20)", "overlap"});
  // Identical ranges overlap too.
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})";
  expectFormatError([&] { parseBytes(rawFile(same, 8)); }, {"overlap"});
  // An empty tensor sitting inside another one's range is not an overlap (no bytes).
  const std::string empty_inside = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_EQ(parseBytes(rawFile(empty_inside, 8)).tensors.size(), 2u);
}

TEST(SafetensorsMalformed, OffsetsOutOfFileOrReversedOrMistyped) {
  expectFormatError(
      [] { parseBytes(rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8)); },
      {"'a'", "end 16", "past the data section (8 bytes)"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8)); },
      {"begin 8 > end 4"});
  expectFormatError(
      [] {
        parseBytes(rawFile(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}})",
            8));
      },
      {"'a'", "data_offsets"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8)); },
      {"non-negative integers"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8)); },
      {"[begin, end]"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 8)); },
      {"[begin, end]"});
  // u64 offsets near 2^64: end - 0 must not wrap into something that passes the size check.
  expectFormatError(
      [] {
        parseBytes(rawFile(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 8));
      },
      {"past the data section"});
}

TEST(SafetensorsMalformed, ShapeTimesDTypeNotByteSize) {
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8));
      },
      {"'w'", "[2,3] x bf16 needs 12 bytes", "[0, 8) hold 8"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,2]}})", 8)); },
      {"needs 4 bytes"});
}

TEST(SafetensorsMalformed, NegativeFractionalAndOverflowingDims) {
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", 16));
      },
      {"'w'", "shape[0] = -1"});
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,16]}})", 16));
      },
      {"shape[0] = 2.5"});
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}})", 16));
      },
      {"shape[0]"});
  // 2^32 * 2^32 * 16 overflows u64; must be caught, not wrapped to a small number.
  expectFormatError(
      [] {
        parseBytes(rawFile(
            R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})",
            16));
      },
      {"'w'", "more than 2^64"});
  // 2^62 * 4 bytes = 2^64 overflows only in the dtype multiply.
  expectFormatError(
      [] {
        parseBytes(rawFile(
            R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})", 16));
      },
      {"more than 2^64"});
  // A dim beyond int64.
  expectFormatError(
      [] {
        parseBytes(rawFile(
            R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})", 16));
      },
      {"shape[0] = 9223372036854775808", "[0, 2^63)"});
  // A zero dim does not hide an overflowing one from the product: 0 * anything fits.
  EXPECT_EQ(
      parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":[0,4294967296],"data_offsets":[0,0]}})", 0))
          .find("w")
          ->numel(),
      0);
  expectFormatError(
      [] {
        parseBytes(
            rawFile(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4));
      },
      {"rank 7 exceeds the limit 6"});
}

TEST(SafetensorsMalformed, DuplicateNamesAndKeys) {
  const std::string dup = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expectFormatError([&] { parseBytes(rawFile(dup, 8)); }, {"duplicate JSON key 'w'"});
  const std::string dup_field =
      R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  expectFormatError([&] { parseBytes(rawFile(dup_field, 4)); }, {"duplicate JSON key 'dtype'"});
  // The same key in two different objects is fine.
  const std::string distinct = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_EQ(parseBytes(rawFile(distinct, 8)).tensors.size(), 2u);
}

TEST(SafetensorsMalformed, UnsupportedAndUnknownDTypes) {
  expectFormatError(
      [] { parseBytes(rawFile(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)); },
      {"'ids'", "unsupported dtype 'I64'", "BF16, F16, F32"});
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"q":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}})", 8));
      },
      {"'q'", "unsupported dtype 'F8_E5M2'", "BF16, F16, F32, F8_E4M3, I32"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"q":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", 8)); },
      {"unknown dtype 'Q4_K'"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"q":{"dtype":3,"shape":[1],"data_offsets":[0,1]}})", 8)); },
      {"'dtype' must be a string"});
}

// FP8 checkpoint weights (F8_E4M3, 1 byte) and packed 4-bit tensors (I32, 4 bytes) parse with
// their element sizes checked against the byte ranges like every other dtype.
TEST(Safetensors, Fp8AndI32Tensors) {
  const SafetensorsHeader h =
      parseBytes(rawFile(R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]},)"
                         R"("q":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})",
                         16));
  ASSERT_NE(h.find("w"), nullptr);
  EXPECT_EQ(h.find("w")->dtype, DType::kF8E4M3);
  EXPECT_EQ(h.find("w")->numel(), 6);
  ASSERT_NE(h.find("q"), nullptr);
  EXPECT_EQ(h.find("q")->dtype, DType::kI32);
  expectFormatError(
      [] {
        parseBytes(rawFile(R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,12]}})", 12));
      },
      {"'w'", "f8_e4m3 needs 6 bytes", "hold 12"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"q":{"dtype":"I32","shape":[2],"data_offsets":[0,4]}})", 8)); },
      {"'q'", "i32 needs 8 bytes", "hold 4"});
}

TEST(SafetensorsMalformed, StructuralErrors) {
  expectFormatError([] { parseBytes(rawFile(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4)); },
                    {"'w'", "missing field 'dtype'"});
  expectFormatError([] { parseBytes(rawFile(R"({"w":[1,2]})", 4)); }, {"'w'", "must be an object"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4)); },
      {"'shape' must be an array"});
  expectFormatError([] { parseBytes(rawFile(R"({"__metadata__":"x"})", 0)); },
                    {"'__metadata__' must be an object"});
  expectFormatError(
      [] { parseBytes(rawFile(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)); },
      {"empty name"});
  std::string deep = R"({"__metadata__":{"k":)";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  deep += "}}";
  expectFormatError([&] { parseBytes(rawFile(deep, 0)); }, {"nesting deeper than the limit 32"});
}

TEST(SafetensorsMalformed, NonStringMetadataIsKeptAsJson) {
  SafetensorsHeader h = parseBytes(rawFile(R"({"__metadata__":{"n":3,"s":"x"}})", 0));
  EXPECT_EQ(h.metadata.at("n"), "3");
  EXPECT_EQ(h.metadata.at("s"), "x");
  EXPECT_TRUE(h.tensors.empty());
}

// Random byte corruption of a valid file: every outcome is success or FormatError, never a
// crash or another exception type (a miniature of the libFuzzer target, run in CI).
TEST(SafetensorsMalformed, RandomCorruptionOnlyThrowsFormatError) {
  const std::vector<uint8_t> good = test::makeSafetensors(twoTensors(), R"({"format":"pt"})");
  std::mt19937 rng(1234);
  int accepted = 0;
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % bytes.size();
      bytes[pos] = static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % (bytes.size() + 1));
    try {
      parseBytes(bytes);
      ++accepted;
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(accepted + rejected, 3000);
}

// ---- model folders --------------------------------------------------------------------------

void writeShard(const TempDir& dir, const std::string& name,
                const std::vector<FakeTensor>& tensors) {
  test::writeBytes(dir / name, test::makeSafetensors(tensors));
}

std::string indexJson(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string s = R"({"metadata":{"total_size":64},"weight_map":{)";
  for (size_t i = 0; i < map.size(); ++i) {
    if (i) s += ',';
    s += "\"" + map[i].first + "\":\"" + map[i].second + "\"";
  }
  return s + "}}";
}

TEST(WeightStore, SingleFileFolder) {
  TempDir dir;
  writeShard(dir, "model.safetensors", twoTensors());
  WeightStore store = WeightStore::openFolder(dir.path());
  EXPECT_EQ(store.numFiles(), 1u);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a.weight", "b.bias"}));
  EXPECT_EQ(store.view("a.weight").as<float>()[2], 0.25f);
  EXPECT_EQ(store.totalTensorBytes(), 32u);
  test::expectInvalidArgument([&] { store.info("c"); }, "name");
}

TEST(WeightStore, ShardedFolder) {
  TempDir dir;
  const auto t = twoTensors();
  FakeTensor c{"c.weight", "F32", {1}, floatBytes({9.0f})};
  writeShard(dir, "model-00001-of-00002.safetensors", {t[0]});
  writeShard(dir, "model-00002-of-00002.safetensors", {t[1], c});
  test::writeText(dir / "model.safetensors.index.json",
                  indexJson({{"a.weight", "model-00001-of-00002.safetensors"},
                             {"b.bias", "model-00002-of-00002.safetensors"},
                             {"c.weight", "model-00002-of-00002.safetensors"}}));
  WeightStore store = WeightStore::openFolder(dir.path());
  EXPECT_EQ(store.numFiles(), 2u);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.view("c.weight").as<float>()[0], 9.0f);
  EXPECT_EQ(store.view("a.weight").as<float>()[0], 1.5f);
  EXPECT_EQ(store.fileOf("b.bias").path().filename(), "model-00002-of-00002.safetensors");
  WeightStore moved = std::move(store);
  EXPECT_EQ(moved.view("a.weight").as<float>()[1], -2.0f);
}

TEST(WeightStore, SingleFileWinsOverIndex) {
  TempDir dir;
  writeShard(dir, "model.safetensors", twoTensors());
  test::writeText(dir / "model.safetensors.index.json", "broken");
  EXPECT_EQ(WeightStore::openFolder(dir.path()).size(), 2u);
}

TEST(WeightStore, FolderErrors) {
  TempDir dir;
  test::expectInvalidArgument([&] { WeightStore::openFolder(dir / "nope"); }, "dir");
  expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                    {"no model.safetensors and no model.safetensors.index.json"});
}

TEST(WeightStore, ShardedIndexErrors) {
  const auto t = twoTensors();
  {
    TempDir dir;  // missing shard
    writeShard(dir, "s1.safetensors", {t[0]});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}, {"b.bias", "s2.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"shard 's2.safetensors'", "'b.bias'", "does not exist"});
  }
  {
    TempDir dir;  // listed tensor absent from its shard
    writeShard(dir, "s1.safetensors", {t[0]});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}, {"b.bias", "s1.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"lists tensor 'b.bias'", "'s1.safetensors'", "does not hold it"});
  }
  {
    TempDir dir;  // one tensor in two shards
    writeShard(dir, "s1.safetensors", {t[0], t[1]});
    writeShard(dir, "s2.safetensors", {t[1]});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}, {"b.bias", "s2.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"'b.bias'", "two shards", "s1.safetensors", "s2.safetensors"});
  }
  {
    TempDir dir;  // a tensor listed twice in the index
    writeShard(dir, "s1.safetensors", {t[0]});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}, {"a.weight", "s1.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"duplicate JSON key 'a.weight'"});
  }
  {
    TempDir dir;  // shard holds a tensor the map does not list
    writeShard(dir, "s1.safetensors", {t[0], t[1]});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); }, {"'b.bias'", "does not list"});
  }
  {
    TempDir dir;  // shard path escaping the folder
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "../s1.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"'../s1.safetensors'", "not a file name"});
  }
  {
    TempDir dir;  // structure
    test::writeText(dir / "model.safetensors.index.json", R"({"metadata":{}})");
    expectFormatError([&] { WeightStore::openFolder(dir.path()); }, {"'weight_map'"});
    test::writeText(dir / "model.safetensors.index.json", R"({"weight_map":{"a":1}})");
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"weight_map['a']", "shard file name"});
    test::writeText(dir / "model.safetensors.index.json", R"({"weight_map":)");
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"model.safetensors.index.json", "invalid JSON"});
  }
  {
    TempDir dir;  // a malformed shard names the shard file
    test::writeBytes(dir / "s1.safetensors", {9, 0, 0, 0, 0, 0, 0, 0, '{'});
    test::writeText(dir / "model.safetensors.index.json",
                    indexJson({{"a.weight", "s1.safetensors"}}));
    expectFormatError([&] { WeightStore::openFolder(dir.path()); },
                      {"s1.safetensors", "header length 9"});
  }
}

}  // namespace
}  // namespace es::model
