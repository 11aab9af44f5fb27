#include <gtest/gtest.h>

#include <vector>

#include "model/backend_page_table.h"
#include "ops/backend.h"

namespace es::model {
namespace {

std::vector<int32_t> layout(const kv::PageTable& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.deviceLayoutElements()));
  t.writeDeviceLayout(out);
  return out;
}

TEST(BackendPageTable, FollowsWhicheverTableItIsGiven) {
  auto backend = ops::makeCpuBackend();
  kv::PageTable a(3, 2, 6), b(3, 2, 6);
  a.setIdentity();
  b.setIdentity();
  b.compactRows(std::vector<int32_t>{2, 0, 1});  // same geometry, other rows
  BackendPageTable copy;
  auto read = [&](const int32_t* p) {
    return std::vector<int32_t>(p, p + a.deviceLayoutElements());
  };
  EXPECT_EQ(read(copy.sync(*backend, a)), layout(a));
  EXPECT_EQ(read(copy.sync(*backend, b)), layout(b));
  // a has no dirty rows of its own any more: the copy must still switch back to it entirely.
  EXPECT_EQ(read(copy.sync(*backend, a)), layout(a));
  a.setRow(1, std::vector<kv::PageId>{5});
  EXPECT_EQ(read(copy.sync(*backend, a)), layout(a));
  kv::PageTable bigger(4, 2, 8);
  bigger.setIdentity();
  const int32_t* p = copy.sync(*backend, bigger);
  EXPECT_EQ(std::vector<int32_t>(p, p + bigger.deviceLayoutElements()), layout(bigger));
}

}  // namespace
}  // namespace es::model
