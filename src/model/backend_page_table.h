#pragma once
// A backend's copy of a page table ([maxBatch, 2, maxPagesPerSeq] i32), kept in step with the
// host truth (kv::PageTable). Only dirty rows move; everything moves when the copy last mirrored
// another table (a model used with several caches) or the table's size changed.
#include <cstdint>

#include "common/buffer.h"
#include "kv/page_table.h"
#include "ops/backend.h"

namespace es::model {

class BackendPageTable {
 public:
  // Brings the copy up to date with `table` and returns it (backend memory). The copies are
  // queued on the backend behind earlier work.
  const int32_t* sync(ops::Backend& backend, kv::PageTable& table);

 private:
  Buffer copy_;
  const kv::PageTable* mirrored_ = nullptr;
  int64_t elements_ = 0;
};

}  // namespace es::model
