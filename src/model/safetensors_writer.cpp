#include "model/safetensors_writer.h"

#include <nlohmann/json.hpp>
#include <system_error>

#include "common/errors.h"

namespace es::model {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path,
                                     const std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata,
                                     std::string what)
    : path_(std::move(path)), tmp_(path_.string() + ".tmp"), what_(std::move(what)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsEntry& e : entries) {
    if (e.name == "__metadata__" || header.contains(e.name)) {
      ES_THROW(InvalidArgument, what_, ": tensor name ", quoteShort(e.name),
               " appears twice (or is reserved) in ", path_.string());
    }
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {dataBytes_, dataBytes_ + e.bytes}}};
    dataBytes_ += e.bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // aligned tensor data, as the reference writer
  headerBytes_ = 8 + text.size();

  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) ES_THROW(InvalidArgument, what_, ": cannot create ", tmp_.string());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out_) {
    out_.close();  // no destructor runs for a constructor that throws: remove the file here
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    ES_THROW(InvalidArgument, what_, ": writing ", tmp_.string(), " failed (disk full?)");
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void SafetensorsWriter::append(std::span<const uint8_t> bytes) {
  if (written_ + bytes.size() > dataBytes_) {
    ES_THROW(InvalidArgument, what_, ": ", tmp_.string(), ": ", written_ + bytes.size(),
             " data bytes appended, more than the ", dataBytes_, " the header announces");
  }
  out_.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  if (!out_) ES_THROW(InvalidArgument, what_, ": writing ", tmp_.string(), " failed (disk full?)");
  written_ += bytes.size();
}

uint64_t SafetensorsWriter::finish() {
  if (written_ != dataBytes_) {
    ES_THROW(InvalidArgument, what_, ": ", tmp_.string(), ": ", written_,
             " data bytes appended, the header announces ", dataBytes_);
  }
  out_.close();
  if (!out_) ES_THROW(InvalidArgument, what_, ": writing ", tmp_.string(), " failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    ES_THROW(InvalidArgument, what_, ": cannot rename ", tmp_.string(), " to ", path_.string(),
             ": ", ec.message());
  }
  finished_ = true;
  return headerBytes_ + dataBytes_;
}

}  // namespace es::model
