#include "train/checkpoint/checkpoint_format.h"

#include "core/checksum.h"
#include "core/error.h"
#include "train/controls/spike_guard.h"

namespace parallm::train::ckpt {

nlohmann::json layout_json(const model::ParamLayout& l) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : l.slots()) a.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}});
  return a;
}

namespace {

// The fixes a damaged state.json leaves the user.
constexpr const char* kFix =
    "the checkpoint is damaged: restore it from a copy, or start over with train.overwrite=true";

// `s` has the form of `pattern`, where '#' stands for a digit and 'x' for a lower-case hex digit.
bool has_form(const std::string& s, const std::string& pattern) {
  if (s.size() != pattern.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i], p = pattern[i];
    const bool digit = c >= '0' && c <= '9';
    if (p == '#' ? !digit : p == 'x' ? !(digit || (c >= 'a' && c <= 'f')) : c != p) return false;
  }
  return true;
}

struct Checker {
  const std::string& path;  // .../state.json

  [[noreturn]] void fail(const std::string& what) const {
    throw IoError("checkpoint.load", fmt::format("{}: {}; {}", path, what, kFix));
  }
  const nlohmann::json& field(const nlohmann::json& j, const char* key, const char* in = "") const {
    if (!j.is_object() || !j.contains(key)) fail(fmt::format("{}\"{}\" is missing", in, key));
    return j[key];
  }
  int64_t integer(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi, const char* in = "") const {
    const auto& v = field(j, key, in);
    if (!v.is_number_integer()) fail(fmt::format("{}\"{}\" is {}, not an integer", in, key, v.dump()));
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) fail(fmt::format("{}\"{}\" = {} is outside [{}, {}]", in, key, x, lo, hi));
    return x;
  }
  void number(const nlohmann::json& j, const char* key, const char* in = "") const {
    const auto& v = field(j, key, in);
    if (!v.is_number()) fail(fmt::format("{}\"{}\" is {}, not a number", in, key, v.dump()));
  }
  std::string string(const nlohmann::json& j, const char* key, const char* in = "") const {
    const auto& v = field(j, key, in);
    if (!v.is_string()) fail(fmt::format("{}\"{}\" is {}, not a string", in, key, v.dump()));
    return v.get<std::string>();
  }
  void crc(const nlohmann::json& j, const char* key, const char* in = "") const {
    if (!has_form(string(j, key, in), "xxxxxxxx")) fail(fmt::format("{}\"{}\" is not a CRC-32", in, key));
  }
};

void check_single(const Checker& c, const nlohmann::json& s, int64_t flat, bool checksums) {
  const auto& files = c.field(s, "files");
  const int64_t bytes = flat * 4;
  if (c.integer(files, "model.bin", 0, INT64_MAX, "files: ") != bytes ||
      c.integer(files, "optim.bin", 0, INT64_MAX, "files: ") != 2 * bytes)
    c.fail(fmt::format("the file sizes {} do not fit flat_size {}", files.dump(), flat));
  if (!checksums) return;
  const auto& sums = c.field(s, "checksums");
  c.crc(sums, "model.bin", "checksums: ");
  c.crc(sums, "optim.bin", "checksums: ");
}

void check_sharded(const Checker& c, const nlohmann::json& s, int64_t flat, bool checksums) {
  const int64_t world = c.integer(s, "world", 1, 1 << 24);
  const auto& shards = c.field(s, "shards");
  if (!shards.is_array() || static_cast<int64_t>(shards.size()) != world)
    c.fail(fmt::format("\"shards\" must list world = {} shards", world));
  int64_t covered = 0;
  for (const auto& sh : shards) {
    if (!has_form(c.string(sh, "file", "a shard's "), "shard-#####-of-#####.bin"))
      c.fail(fmt::format("shard file name {} is not of the form shard-RRRRR-of-NNNNN.bin", sh["file"].dump()));
    const int64_t size = c.integer(sh, "shard_size", 0, flat, "a shard's ");
    if (checksums) c.crc(sh, "crc32", "a shard's ");
    const auto& pieces = c.field(sh, "pieces", "a shard's ");
    if (!pieces.is_array()) c.fail("a shard's \"pieces\" is not a list");
    for (const auto& p : pieces) {
      if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() || !p[1].is_number_integer() ||
          !p[2].is_number_integer())
        c.fail(fmt::format("shard piece {} is not [flat, count, offset]", p.dump()));
      const auto f = p[0].get<int64_t>(), n = p[1].get<int64_t>(), o = p[2].get<int64_t>();
      if (f < 0 || n < 0 || o < 0 || f > flat - n || o > size - n || n > flat - covered)
        c.fail(
            fmt::format("shard piece {} lies outside the model ({}) or its shard ({}), or the pieces hold more "
                        "than the model",
                        p.dump(), flat, size));
      covered += n;
    }
  }
  if (covered != flat) c.fail(fmt::format("the shards hold {} elements, the model {}", covered, flat));
}

}  // namespace

std::string state_crc(const nlohmann::json& state) {
  nlohmann::json s = state;
  s.erase("state_crc32");
  s.erase("_dir");
  return crc32_hex(crc32_of(s.dump()));
}

void check_state(const nlohmann::json& s, const std::string& dir) {
  const std::string path = dir + "/state.json";
  const Checker c{path};
  if (!s.is_object()) c.fail("not a JSON object");
  const int64_t format = c.integer(s, "format", 1, INT32_MAX);
  if (format > kFormatSharded)
    throw IoError("checkpoint.load", fmt::format("{}: checkpoint format {} was written by a newer parallm; this one "
                                                 "reads formats 1 to {}: resume with the parallm that wrote it",
                                                 path, format, kFormatSharded));
  const bool checksums = format >= kFormat;
  // One flipped bit turns format 3 into 1 (or 4 into 2): a checkpoint with
  // checksums says so whatever its format claims, and is never read unverified.
  if (!checksums && (s.contains("state_crc32") || s.contains("checksums")))
    c.fail(fmt::format("format {} predates checksums, yet the file has them: its format field is damaged", format));
  if (checksums && c.string(s, "state_crc32") != state_crc(s))
    c.fail("its content does not match its checksum (state_crc32)");
  c.integer(s, "iter", 0, INT32_MAX);
  c.integer(s, "optimizer_steps", 0, INT32_MAX);
  c.number(s, "best_val_loss");
  if (!c.field(s, "config").is_object()) c.fail("\"config\" is not an object");
  if (s.contains("unwritten_records") && !s["unwritten_records"].is_array())
    c.fail("\"unwritten_records\" is not a list");
  if (s.contains("spike_guard")) try {
      SpikeGuardState::from_json(s["spike_guard"]);
    } catch (const IoError& e) {
      c.fail(e.message());
    }
  if (s.contains("layout"))  // the layout that saved it (train/checkpoint/checkpoint.h)
    for (const char* k : {"world", "dp", "tp", "pp", "cp", "sequences"})
      c.integer(s["layout"], k, 1, INT32_MAX, "layout: ");
  if (!c.field(s, "params").is_array()) c.fail("\"params\" is not a list");
  const int64_t flat = c.integer(s, "flat_size", 1, INT64_MAX / 16);
  if (sharded(static_cast<int>(format)))
    check_sharded(c, s, flat, checksums);
  else
    check_single(c, s, flat, checksums);
}

}  // namespace parallm::train::ckpt
