#include "model/backend_page_table.h"

namespace es::model {

const int32_t* BackendPageTable::sync(ops::Backend& backend, kv::PageTable& table) {
  if (elements_ != table.deviceLayoutElements()) {
    elements_ = table.deviceLayoutElements();
    copy_ = backend.allocate(elements_ * static_cast<int64_t>(sizeof(int32_t)));
    mirrored_ = nullptr;
  }
  // The table's dirty set is relative to whatever copy it last synced; a copy that mirrored
  // another table needs every row.
  if (mirrored_ != &table) {
    table.markAllDirty();
    mirrored_ = &table;
  }
  int32_t* dst = copy_.as<int32_t>();
  table.copyDirty([&](const kv::PageTableRange& r, const int32_t* src) {
    backend.copyFromHostAsync(dst + r.offset, src, r.count * static_cast<int64_t>(sizeof(int32_t)));
  });
  return dst;
}

}  // namespace es::model
