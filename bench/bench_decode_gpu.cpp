// Greedy batch-1 decode tokens/s of a target model folder on the CUDA backend, and its fraction
// of the weight-read roofline (every decode step reads all weights once).
//
//   bench_decode_gpu MODEL_DIR [PROMPT_LEN=128] [GEN_LEN=256] [COPY_GBPS=4200]
//
// The first version of the forward goes through the host API (one logits download per step),
// like the anchor's argmax it picks the next token from the last row; the performance issue moves
// the loop onto the device with CUDA graphs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"

namespace {

// Anonymous resident memory of this process (RssAnon, bytes): what the load adds beyond the page
// cache (the memory-mapped checkpoint pages count as file/shmem RSS, not here).
int64_t rssAnonBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "RssAnon:") {
      int64_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

// Samples RssAnon every 5 ms while alive; peak() is the largest value seen.
class PeakAnonSampler {
 public:
  PeakAnonSampler()
      : thread_([this] {
          while (!stop_) {
            peak_ = std::max<int64_t>(peak_, rssAnonBytes());
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  ~PeakAnonSampler() { finish(); }
  int64_t finish() {
    if (!stop_.exchange(true)) thread_.join();
    return std::max<int64_t>(peak_, rssAnonBytes());
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace es;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [PROMPT_LEN] [GEN_LEN] [COPY_GBPS]\n", argv[0]);
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_decode_gpu: no CUDA device\n");
    return 2;
  }
  const int32_t promptLen = argc > 2 ? std::atoi(argv[2]) : 128;
  const int32_t genLen = argc > 3 ? std::atoi(argv[3]) : 256;
  const double copyGBps = argc > 4 ? std::atof(argv[4]) : 4200.0;
  try {
    auto backend = ops::makeCudaBackend();
    const int64_t anonBefore = rssAnonBytes();
    PeakAnonSampler sampler;
    const auto loadStart = std::chrono::steady_clock::now();
    model::TargetModel m(argv[1], *backend, std::max(promptLen, 1));
    const double loadSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loadStart).count();
    const int64_t loadPeakAnon = sampler.finish() - anonBefore;
    kv::KvCacheConfig kvc;
    kvc.maxBatchSize = 1;
    kvc.maxSequenceLength = promptLen + genLen + 16;
    kvc.dtype = backend->computeDtype();
    kvc.baseLayers = m.kvLayerShapes();
    const int64_t V = m.config().vocab_size;

    auto run = [&](int32_t steps) {
      kv::KvCacheManager cache(kvc, MemorySpace::kDevice);
      const int32_t slot = cache.admit();
      std::mt19937 rng(0);
      model::ForwardBatch prefill;
      for (int32_t i = 0; i < promptLen; ++i) {
        prefill.tokens.push_back(static_cast<int32_t>(rng() % V));
        prefill.positions.push_back(i);
        prefill.tokenToSequence.push_back(slot);
      }
      prefill.cuQSeqLens = {0, promptLen};
      prefill.kvLengths = {promptLen};
      prefill.logitRows = {promptLen - 1};
      model::ForwardResult r = m.forward(prefill, cache);
      cache.commitBase(slot, promptLen);
      const auto t0 = std::chrono::steady_clock::now();
      for (int32_t s = 0; s < steps; ++s) {
        const int32_t next = static_cast<int32_t>(
            std::max_element(r.logits.begin(), r.logits.end()) - r.logits.begin());
        model::ForwardBatch step;
        step.tokens = {next};
        step.positions = {cache.baseLength(slot)};
        step.tokenToSequence = {slot};
        step.cuQSeqLens = {0, 1};
        step.kvLengths = {cache.baseLength(slot) + 1};
        step.logitRows = {0};
        r = m.forward(step, cache);
        cache.commitBase(slot, 1);
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    run(16);  // warm-up: module load, cuBLASLt heuristics
    const double seconds = run(genLen);
    const double tokS = genLen / seconds;
    const double rooflineTokS = copyGBps * 1e9 / static_cast<double>(m.weightBytes());
    std::printf(
        "{\"bench\": \"edgespec-decode\", \"model\": \"%s\", \"weight_bytes\": %lld, "
        "\"prompt_len\": %d, \"gen_len\": %d, \"decode_tok_s\": %.2f, "
        "\"roofline_tok_s\": %.1f, \"roofline_fraction\": %.3f, \"workspace_bytes\": %lld, "
        "\"load_s\": %.2f, \"load_peak_host_anon_bytes\": %lld}\n",
        argv[1], static_cast<long long>(m.weightBytes()), promptLen, genLen, tokS, rooflineTokS,
        tokS / rooflineTokS, static_cast<long long>(m.workspaceBytes()), loadSeconds,
        static_cast<long long>(loadPeakAnon));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_gpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
