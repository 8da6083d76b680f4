// The checkpoint's state.json, shared by the writer (checkpoint_write.cpp), the reader (checkpoint.cpp) and its
// checker (checkpoint_format.cpp): format numbers, the self-checksum over
// state.json's content, and the structural check every load starts with.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/params.h"

namespace parallm::train::ckpt {

constexpr int kFormatLegacySharded = 2;  // format 1 (one file per part) and 2: before checksums
constexpr int kFormat = 3, kFormatSharded = 4;
inline bool sharded(int format) {
  return format == kFormatLegacySharded || format == kFormatSharded;
}

// state.json's parameter table: each slot's name, shape and offset.
nlohmann::json layout_json(const model::ParamLayout& l);

// The CRC-32 of state.json's content without its own "state_crc32" entry
// (nor the loader's "_dir"), as 8 hex digits.
std::string state_crc(const nlohmann::json& state);

// Checks a parsed state.json read from `dir`: every field the loaders read is
// there with the right type and range, the files it names are plain names in
// `dir`, and (formats 3 and 4) its own checksum matches. IoError naming the
// field and the file otherwise.
void check_state(const nlohmann::json& s, const std::string& dir);

}  // namespace parallm::train::ckpt
