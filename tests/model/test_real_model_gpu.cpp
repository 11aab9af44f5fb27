// A real-shape model (ES_REAL_MODEL_DIR, e.g. a random-weight Qwen3-0.6B saved by
// tools/torch_anchor.py --save) on the CUDA backend against transformers' f32 last-token logits
// (tools/real_model_reference.py). Skips when the variable is not set: it needs the GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/test_util.h"

namespace es::model {
namespace {

// 28 bf16 layers: relative to the row's scale the logits agree to a few percent.
constexpr double kLogitTolerance = 5e-2;

TEST(RealModelGpu, LastTokenLogitsMatchTransformers) {
  ES_SKIP_IF_NO_GPU();
  const char* dir = std::getenv("ES_REAL_MODEL_DIR");
  if (dir == nullptr) GTEST_SKIP() << "ES_REAL_MODEL_DIR not set";
  std::ifstream f(std::string(dir) + "/edgespec_reference.json");
  ASSERT_TRUE(f.good()) << "run tools/real_model_reference.py first";
  const nlohmann::json ref = nlohmann::json::parse(f);
  const std::vector<int32_t> prompt = ref["prompt"];
  const std::vector<float> want = ref["last_logits"];
  auto backend = ops::makeCudaBackend();
  TargetModel model(dir, *backend, static_cast<int32_t>(prompt.size()));
  kv::KvCacheConfig kvc;
  kvc.maxBatchSize = 1;
  kvc.maxSequenceLength = 256;
  kvc.dtype = DType::kBF16;
  kvc.baseLayers = model.kvLayerShapes();
  kv::KvCacheManager cache(kvc, MemorySpace::kDevice);
  cache.admit();
  ForwardBatch b;
  for (size_t i = 0; i < prompt.size(); ++i) {
    b.tokens.push_back(prompt[i]);
    b.positions.push_back(static_cast<int32_t>(i));
    b.tokenToSequence.push_back(0);
  }
  b.cuQSeqLens = {0, static_cast<int32_t>(prompt.size())};
  b.kvLengths = {static_cast<int32_t>(prompt.size())};
  b.logitRows = {static_cast<int32_t>(prompt.size()) - 1};
  const ForwardResult r = model.forward(b, cache);
  ASSERT_EQ(r.logits.size(), want.size());
  double worst = 0, scale = 0, dot = 0, nGot = 0, nWant = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(r.logits[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    dot += static_cast<double>(r.logits[i]) * want[i];
    nGot += static_cast<double>(r.logits[i]) * r.logits[i];
    nWant += static_cast<double>(want[i]) * want[i];
  }
  const double cosine = dot / std::sqrt(nGot * nWant);
  std::printf("real model: max |diff| %.4g over logit scale %.4g, cosine %.6f, top margin %.4g\n",
              worst, scale, cosine, static_cast<double>(ref["top_margin"]));
  EXPECT_LT(worst / (1.0 + scale), kLogitTolerance);
  EXPECT_GT(cosine, 0.999);
  const auto argmax = [](const std::vector<float>& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
  };
  if (static_cast<double>(ref["top_margin"]) > 0.05 * (1.0 + scale)) {
    EXPECT_EQ(argmax(r.logits), argmax(want));
  }
}

}  // namespace
}  // namespace es::model
