#include "ops/backend_page_table.h"

namespace es::ops {

const int32_t* BackendPageTable::sync(Backend& backend, kv::PageTable& table) {
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
  backend.syncPageTable(table, copy_.as<int32_t>());
  return copy_.as<int32_t>();
}

}  // namespace es::ops
