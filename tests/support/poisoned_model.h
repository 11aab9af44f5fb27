#pragma once
// A model with non-finite weights for the tests of non-finite logits: the qwen3 fixture copied
// into a temporary folder with one row of one tensor overwritten.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace es::test {

inline constexpr uint16_t kBf16Inf = 0x7f80, kBf16NaN = 0x7fc0;

// A copy of the qwen3 fixture in a fresh folder whose bf16 tensor `name` [rows, cols] has row
// `row` set to the bf16 bits `bits` (kBf16Inf, kBf16NaN); removed again by the destructor.
class PoisonedModel {
 public:
  static std::string fixtureDir() { return test_data_dir() + "/models/qwen3"; }

  PoisonedModel(const std::string& name, int32_t row, uint16_t bits) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("es_non_finite_" + std::string(info->name()) + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(row));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const std::filesystem::directory_entry& e :
         std::filesystem::directory_iterator(fixtureDir())) {
      std::filesystem::copy_file(e.path(), dir_ / e.path().filename());
    }
    const std::filesystem::path weights = dir_ / "model.safetensors";
    std::ifstream in(weights, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    uint64_t headerBytes = 0;
    std::memcpy(&headerBytes, bytes.data(), 8);
    const nlohmann::json header =
        nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + headerBytes);
    const nlohmann::json& t = header.at(name);
    EXPECT_EQ(t.at("dtype"), "BF16");
    const int64_t cols = t.at("shape")[1];
    const int64_t begin = 8 + static_cast<int64_t>(headerBytes) +
                          t.at("data_offsets")[0].get<int64_t>() + row * cols * 2;
    for (int64_t i = 0; i < cols; ++i) std::memcpy(bytes.data() + begin + i * 2, &bits, 2);
    std::ofstream out(weights, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~PoisonedModel() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace es::test
