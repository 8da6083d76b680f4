#include "train/records/tb_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "comm/topology.h"
#include "core/error.h"

namespace parallm::train {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
template <class T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(b, sizeof(T));
}
// Field `field` of wire type 2 (length-delimited).
void bytes_field(std::string& out, int field, const std::string& data) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, data.size());
  out += data;
}
void wall_time_field(std::string& out, double t) {
  out += '\x09';  // field 1, wire type 1 (64-bit)
  fixed(out, t);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  bytes_field(v, 1, tag);  // Value.tag
  v += '\x15';             // Value.simple_value: field 2, wire type 5 (32-bit)
  fixed(v, value);
  std::string summary;
  bytes_field(summary, 1, v);  // Summary.value
  std::string e;
  wall_time_field(e, wall_time);
  if (step != 0) {
    e += '\x10';  // Event.step: field 2, varint
    varint(e, static_cast<uint64_t>(step));
  }
  bytes_field(e, 5, summary);  // Event.summary
  return e;
}

std::string version_event(double wall_time) {
  std::string e;
  wall_time_field(e, wall_time);
  bytes_field(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string tf_record(const std::string& data) {
  std::string r;
  fixed(r, static_cast<uint64_t>(data.size()));
  fixed(r, masked_crc32c(r.data(), 8));
  r += data;
  fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TbWriter::TbWriter(const std::string& dir) {
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{:010d}.{}.{}", static_cast<int64_t>(now()), comm::this_host(), ::getpid()))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  PARALLM_CHECK(f_, IoError, "train.tensorboard", "cannot create {}: {}", path_, std::strerror(errno));
  write(version_event(now()));
}

TbWriter::~TbWriter() {
  if (f_) std::fclose(f_);
}

void TbWriter::write(const std::string& event) {
  const std::string r = tf_record(event);
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size() || std::fflush(f_) != 0) {
    if (error_.empty()) error_ = fmt::format("cannot write {}: {}", path_, std::strerror(errno));
  }
}

void TbWriter::scalar(const std::string& tag, int64_t step, float value) {
  write(scalar_event(now(), step, tag, value));
}

void TbWriter::write_record(const nlohmann::json& record) {
  const std::string kind = record.value("kind", "metrics");
  const int64_t step =
      record.contains("step") && record["step"].is_number_integer() ? record["step"].get<int64_t>() : 0;
  for (const auto& [key, v] : record.items()) {
    if (key == "step" || key == "batch" || !v.is_number()) continue;
    scalar(kind + "/" + key, step, v.get<float>());
  }
}

}  // namespace parallm::train
