#include <gtest/gtest.h>

#include <string>

#include "common/buffer.h"
#include "common/errors.h"
#include "common/tensor_view.h"

namespace es {
namespace {

TEST(Errors, InvalidArgumentNamesArgumentValueAndLimit) {
  try {
    ES_CHECK_ARG(false, "someFunction", "maxBatchSize", -3, "must be > ", 0);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "someFunction: argument 'maxBatchSize' = -3 must be > 0");
  }
  EXPECT_THROW(ES_CHECK_ARG(1 > 2, "f", "x", 1, "bad"), std::runtime_error);
  EXPECT_NO_THROW(ES_CHECK_ARG(2 > 1, "f", "x", 1, "bad"));
}

TEST(Errors, QuoteShortCutsLongNames) {
  EXPECT_EQ(quoteShort("w"), "'w'");
  EXPECT_EQ(quoteShort(std::string(120, 'x')), "'" + std::string(120, 'x') + "'");
  EXPECT_EQ(quoteShort(std::string(200, 'x')), "'" + std::string(120, 'x') + "...'");
}

TEST(TensorView, ShapeAndChecks) {
  float storage[24];
  TensorView v = TensorView::make(storage, DType::kF32, {2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.bytes(), 96);
  EXPECT_EQ(v.dim(2), 4);
  EXPECT_EQ(v.describe(), "f32[2, 3, 4] host");
  EXPECT_EQ(v.as<float>(), storage);
  EXPECT_THROW(v.as<int32_t>(), InvalidArgument);
  EXPECT_THROW(v.dim(3), InvalidArgument);
  EXPECT_THROW(TensorView::make(storage, DType::kF32, {2, -1}), InvalidArgument);
  EXPECT_THROW(TensorView::make(nullptr, DType::kF32, {2}), InvalidArgument);
  EXPECT_NO_THROW(TensorView::make(nullptr, DType::kF32, {0, 5}));
  EXPECT_THROW(TensorView::make(storage, DType::kF32, {1, 1, 1, 1, 1, 1, 1}), InvalidArgument);
}

TEST(Buffer, HostAllocationAlignedMoveOnly) {
  Buffer a = Buffer::allocate(MemorySpace::kHost, 1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
  a.as<uint8_t>()[999] = 7;  // the whole range is usable
  Buffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.bytes(), 1000);
  EXPECT_EQ(b.as<uint8_t>()[999], 7);
  EXPECT_NO_THROW(b.view(DType::kF32, {250}));
  EXPECT_THROW(b.view(DType::kF32, {251}), InvalidArgument);
  EXPECT_THROW(Buffer::allocate(MemorySpace::kHost, -1), InvalidArgument);
  EXPECT_EQ(Buffer::allocate(MemorySpace::kHost, 0).data(), nullptr);
}

TEST(Buffer, DeviceRequestWithoutDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a device is present";
  EXPECT_THROW(Buffer::allocate(MemorySpace::kDevice, 64), Error);
}

}  // namespace
}  // namespace es
