// TensorBoard event files (train.tensorboard=true): the run's metrics
// records as scalars, in <out_dir>/events.out.tfevents.<unix time>.<host>.<pid>
// (a resumed run adds a file; TensorBoard reads every file of a directory).
//
// The format, written by hand (a few protobuf fields, no libprotobuf): a file
// is a sequence of records, each a u64 length, the masked CRC-32C of those 8
// bytes, the serialized Event, and the masked CRC-32C of it (all
// little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8). The first
// Event holds file_version "brain.Event:2"; then each scalar is an Event with
// wall_time, step and summary { value { tag, simple_value } }. Each record
// is written to the file at once (stdio, flushed per record), so TensorBoard
// sees a run as it goes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace parallm::train {

// CRC-32C (Castagnoli), and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The bytes of Event{wall_time, step, summary{value{tag, simple_value}}}, and of
// Event{wall_time, file_version}.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
std::string version_event(double wall_time);
// A record around an event's bytes.
std::string tf_record(const std::string& data);

class TbWriter {
 public:
  // Creates the file in `dir` (IoError naming it if it cannot).
  explicit TbWriter(const std::string& dir);
  ~TbWriter();
  TbWriter(const TbWriter&) = delete;
  TbWriter& operator=(const TbWriter&) = delete;
  // A metrics record's numbers (every numeric field but step and batch) as
  // scalars "<kind>/<field>" at its step (0 without one).
  void write_record(const nlohmann::json& record);
  void scalar(const std::string& tag, int64_t step, float value);
  const std::string& path() const { return path_; }
  std::string write_error() const { return error_; }

 private:
  void write(const std::string& event);
  std::string path_, error_;
  std::FILE* f_ = nullptr;
};

}  // namespace parallm::train
