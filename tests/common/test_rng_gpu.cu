// Host and device produce the same bits from the one definition in common/rng.h.
#include <gtest/gtest.h>

#include <vector>

#include "common/rng.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

__global__ void draw_uniforms(uint64_t seed, int64_t first_position, int count, float* out) {
  // out: [count * 5 purposes * 4 lanes] f32
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count * 20) return;
  const int64_t position = first_position + i / 20;
  const auto purpose = static_cast<RngPurpose>((i / 4) % 5);
  const uint32_t lane = static_cast<uint32_t>(i % 4);
  out[i] = request_uniform(seed, position, purpose, lane);
}

__global__ void draw_blocks(uint32_t key0, uint32_t key1, int count, uint32_t* out) {
  // out: [count, 4] u32, counter (i, ~i, i*7, 0x243f6a88)
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const uint32_t u = static_cast<uint32_t>(i);
  const Philox4x32Block b = philox4x32_10({{u, ~u, u * 7u, 0x243f6a88u}}, key0, key1);
  for (int k = 0; k < 4; ++k) out[i * 4 + k] = b.v[k];
}

TEST(RngGpu, DeviceMatchesHostBitForBit) {
  ES_SKIP_IF_NO_GPU();
  constexpr int kPositions = 4099;
  const uint64_t seed = 0x0123456789abcdefull;
  const int64_t first = (int64_t{1} << 32) - 2000;  // crosses the position high word
  test::DeviceArray<float> device_u(kPositions * 20);
  draw_uniforms<<<(kPositions * 20 + 255) / 256, 256>>>(seed, first, kPositions, device_u.get());
  ES_CUDA_CHECK_LAUNCH();
  const std::vector<float> got = device_u.download();
  for (int i = 0; i < kPositions * 20; ++i) {
    const float want = request_uniform(seed, first + i / 20, static_cast<RngPurpose>((i / 4) % 5),
                                       static_cast<uint32_t>(i % 4));
    ASSERT_EQ(got[i], want) << "index " << i;
  }

  constexpr int kBlocks = 10000;
  test::DeviceArray<uint32_t> device_b(kBlocks * 4);
  draw_blocks<<<(kBlocks + 255) / 256, 256>>>(0xa4093822u, 0x299f31d0u, kBlocks, device_b.get());
  ES_CUDA_CHECK_LAUNCH();
  const std::vector<uint32_t> blocks = device_b.download();
  for (int i = 0; i < kBlocks; ++i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const Philox4x32Block want =
        philox4x32_10({{u, ~u, u * 7u, 0x243f6a88u}}, 0xa4093822u, 0x299f31d0u);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(blocks[i * 4 + k], want.v[k]) << "block " << i;
  }
}

}  // namespace
}  // namespace es
