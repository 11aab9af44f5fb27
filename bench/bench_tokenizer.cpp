// Tokenizer throughput (CPU, Google Benchmark): Qwen3's tokenizer.json (the committed test
// fixture) encoding English text (this repository's README and docs, about 0.1-0.2 MB, looped),
// encoding text whose words are nearly all unseen (pseudo-random letter strings: the merge loop
// without the word cache), and decoding. Bytes/s are input bytes for encode, output bytes for
// decode.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace {

using namespace es::tokenizer;
const std::filesystem::path kRepo = std::filesystem::path(__FILE__).parent_path().parent_path();

const BpeTokenizer& qwen3() {
  static const BpeTokenizer tok(
      loadTokenizerJson(kRepo / "tests/data/tokenizer/qwen3/tokenizer.json"));
  return tok;
}

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string& englishText() {
  static const std::string text = [] {
    std::string t = readFile(kRepo / "README.md");
    for (const auto& e : std::filesystem::directory_iterator(kRepo / "docs"))
      if (e.path().extension() == ".md") t += readFile(e.path());
    return t;
  }();
  return text;
}

const std::string& unseenWordsText() {
  static const std::string text = [] {
    std::string t;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return x;
    };
    while (t.size() < (1 << 20)) {
      const size_t len = 3 + next() % 9;
      t += ' ';
      for (size_t i = 0; i < len; ++i) t += static_cast<char>('a' + next() % 26);
    }
    return t;
  }();
  return text;
}

void BM_EncodeEnglish(benchmark::State& state) {
  const std::string& text = englishText();
  (void)qwen3().encode(text);  // load outside the timing; the word cache warms as in a real run
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = qwen3().encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeEnglish)->Unit(benchmark::kMillisecond);

// Each iteration encodes a different 64 KB slice of 1 MB of random words, so the cache rarely
// helps (it fills up and is cleared as the words keep coming).
void BM_EncodeUnseenWords(benchmark::State& state) {
  const std::string& text = unseenWordsText();
  (void)qwen3();
  const size_t slice = 64 << 10;
  size_t offset = 0;
  for (auto _ : state) {
    auto ids = qwen3().encode(std::string_view(text).substr(offset, slice));
    benchmark::DoNotOptimize(ids.data());
    offset = (offset + slice) % (text.size() - slice);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * slice));
}
BENCHMARK(BM_EncodeUnseenWords)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const std::vector<int32_t> ids = qwen3().encode(englishText());
  for (auto _ : state) {
    auto text = qwen3().decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * englishText().size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_LoadTokenizerJson(benchmark::State& state) {
  for (auto _ : state) {
    auto spec = loadTokenizerJson(kRepo / "tests/data/tokenizer/qwen3/tokenizer.json");
    BpeTokenizer tok(std::move(spec));
    benchmark::DoNotOptimize(&tok);
  }
}
BENCHMARK(BM_LoadTokenizerJson)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
