// The device copy of the page table, uploaded through the CUDA backend's queued copies as the
// models do (model/backend_page_table.h), matches the host truth after random mutation
// sequences, and an upload writes only the dirty rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kv/page_table.h"
#include "ops/backend.h"
#include "support/gpu_test_util.h"

namespace es::kv {
namespace {

std::vector<int32_t> hostImage(const PageTable& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.deviceLayoutElements()));
  t.writeDeviceLayout(out);
  return out;
}

// One random valid mutation of any kind the host API offers.
void randomMutation(PageTable& t, std::mt19937& rng) {
  const int32_t B = t.maxBatch(), P = t.maxPagesPerSeq(), N = t.numPages();
  std::uniform_int_distribution<int32_t> slot(0, B - 1), page(0, N - 1), len(0, P),
      logical(0, P - 1), kind(0, 4);
  auto randomDenseRow = [&] {
    std::vector<PageId> row;
    const int32_t n = len(rng);
    while (static_cast<int32_t>(row.size()) < n) {
      const PageId id = page(rng);
      if (std::find(row.begin(), row.end(), id) == row.end()) row.push_back(id);
    }
    return row;
  };
  switch (kind(rng)) {
    case 0:
      t.setRow(slot(rng), randomDenseRow());
      break;
    case 1: {
      std::vector<PageTableRowUpdate> updates;
      std::vector<int32_t> slots(static_cast<size_t>(B));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      const int32_t n = 1 + static_cast<int32_t>(rng() % std::min(B, 4));
      for (int32_t i = 0; i < n; ++i)
        updates.push_back({slots[static_cast<size_t>(i)], randomDenseRow()});
      t.setRows(updates);
      break;
    }
    case 2: {
      const int32_t s = slot(rng), p = logical(rng);
      const PageId id = page(rng);
      auto row = t.kRow(s);
      if (std::find(row.begin(), row.end(), id) == row.end()) t.setEntry(s, p, id);
      break;
    }
    case 3:
      t.clearEntry(slot(rng), logical(rng));
      break;
    case 4: {
      std::vector<int32_t> perm(static_cast<size_t>(B));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (auto& d : perm)
        if (rng() % 4 == 0) d = -1;  // retire some
      t.compactRows(perm);
      break;
    }
  }
}

TEST(PageTableUploadGpu, DeviceCopyMatchesHostAfterRandomMutations) {
  ES_SKIP_IF_NO_GPU();
  for (auto [B, P, N] : {std::tuple{1, 1, 1}, std::tuple{7, 5, 64}, std::tuple{64, 33, 4096}}) {
    PageTable t(B, P, N);
    if (int64_t{B} * P <= N) t.setIdentity();
    test::DeviceArray<int32_t> device(static_cast<size_t>(t.deviceLayoutElements()));
    std::unique_ptr<ops::Backend> backend = ops::makeCudaBackend();
    auto upload = [&] {
      return t.copyDirty([&](const PageTableRange& r, const int32_t* src) {
        backend->copyFromHostAsync(device.get() + r.offset, src, r.count * 4);
      });
    };
    upload();
    backend->synchronize();
    ASSERT_EQ(device.download(), hostImage(t));
    std::mt19937 rng(1234 + B);
    for (int step = 0; step < 300; ++step) {
      const int mutations = 1 + static_cast<int>(rng() % 3);
      for (int m = 0; m < mutations; ++m) randomMutation(t, rng);
      const std::vector<PageTableRange> expectedRanges = t.dirtyRanges();
      // Poison everything outside the dirty ranges on the device: an upload that copied a
      // clean row would overwrite the poison.
      std::vector<int32_t> before = device.download();
      std::vector<uint8_t> isDirty(before.size(), 0);
      for (const auto& r : expectedRanges) std::fill_n(isDirty.begin() + r.offset, r.count, 1);
      std::vector<int32_t> poisoned = before;
      for (size_t i = 0; i < poisoned.size(); ++i)
        if (!isDirty[i]) poisoned[i] = test::poison_i32();
      device.upload(poisoned);
      const std::vector<PageTableRange> copied = upload();
      backend->synchronize();
      ASSERT_EQ(copied, expectedRanges);
      const std::vector<int32_t> got = device.download();
      const std::vector<int32_t> want = hostImage(t);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], isDirty[i] ? want[i] : test::poison_i32())
            << "B=" << B << " step " << step << " element " << i;
      }
      // Restore the clean rows (they were correct before poisoning) for the next step.
      for (size_t i = 0; i < got.size(); ++i)
        if (!isDirty[i])
          poisoned[i] = before[i];
        else
          poisoned[i] = got[i];
      device.upload(poisoned);
      ASSERT_EQ(device.download(), want);
    }
  }
}

}  // namespace
}  // namespace es::kv
