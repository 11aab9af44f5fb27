#pragma once
// `edgespec generate`: text in, text out on a model folder (the embedded default model when no
// --model is given), streaming the answer to stdout; statistics go to stderr.
#include <cstdint>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace es::cli {
void addGenerateCommand(CLI::App& app);

// Whether the default model's shipped DFlash draft runs when no --draft/--no-draft/--model is
// given: only where it measured faster than plain decoding, i.e. on the cuda backend with every
// request greedy (temperature 0); on the cpu backend it did not pay even at a verify width of
// kCpuVerifyWidth (docs/perf.md). temperatures: one per request.
bool defaultDraftPays(std::string_view backendName, const std::vector<float>& temperatures);

// The verify width W of `--verify-width` (rows one speculative step verifies per request, of
// the draft's blockSize-row proposal): "auto" is the block size on cuda and kCpuVerifyWidth
// (capped at the block size) on cpu; otherwise an integer in [2, blockSize]. Anything else is
// an InvalidArgument naming --verify-width and the limit.
// The fastest width measured on the 2-core CPU with the default model's draft (docs/perf.md,
// 2026-11-30, 128-token answers: W = 3, 4, 5, 6, 8, 16 gave 0.83, 0.97, 0.79, 0.74, 0.68,
// 0.41x plain at T = 0).
inline constexpr int32_t kCpuVerifyWidth = 4;
int32_t resolveVerifyWidth(std::string_view flag, std::string_view backendName, int32_t blockSize);

// Rows of one target forward for the prefill, `--prefill-chunk` (every chunk reads all weights
// once). "auto": on cuda the longest prompt rounded up to a multiple of 256, within [256,
// kMaxAutoPrefillChunk], so a prompt up to 4,096 tokens prefills in one forward (Qwen3-8B, 4,096
// tokens: 103.6 ms as one forward against 170.8 ms in 256-row chunks on the H200,
// docs/perf.md); on cpu 256 (the workspace's activations grow with the rows). Otherwise an
// integer in [16, 65536]. Anything else is an InvalidArgument naming --prefill-chunk and the limit.
inline constexpr int32_t kMaxAutoPrefillChunk = 4096;
int32_t resolvePrefillChunk(std::string_view flag, std::string_view backendName, int64_t longestPrompt);
}  // namespace es::cli
