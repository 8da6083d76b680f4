#include "hf/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/error.h"

namespace parallm::hf {

namespace {

constexpr const char* kSafetensorsWhere = "safetensors";
constexpr uint64_t kMaxHeader = 100'000'000;

// Bits per element of each dtype the format defines; 0 for an unknown one.
int bits_of(const std::string& d) {
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},        {"U8", 8},          {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
      {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
      {"I32", 32},        {"U32", 32},        {"F32", 32},    {"I64", 64},    {"U64", 64},    {"F64", 64},
      {"C64", 64},        {"F4", 4},          {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  const auto it = bits.find(d);
  return it == bits.end() ? 0 : it->second;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, NaN
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400));
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | ((mant & 0x3ff) << 13);
    }
  } else {
    bits = sign | static_cast<uint32_t>(exp - 15 + 127) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A tensor entry of the header, checked.
StTensor tensor_of(const std::string& path, const std::string& name, const nlohmann::json& e) {
  auto bad = [&](const std::string& what) {
    return IoError(kSafetensorsWhere,
                   fmt::format("{}: tensor \"{}\": {} (entry {})", path, name, what, e.dump().substr(0, 200)));
  };
  if (!e.is_object()) throw bad("not an object");
  StTensor t;
  t.name = name;
  if (!e.contains("dtype") || !e["dtype"].is_string()) throw bad("no dtype string");
  t.dtype = e["dtype"].get<std::string>();
  const int bits = bits_of(t.dtype);
  if (bits == 0) throw bad("unknown dtype \"" + t.dtype + "\"");
  if (!e.contains("shape") || !e["shape"].is_array()) throw bad("no shape list");
  uint64_t n = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned()) throw bad("a shape entry is not a size");
    t.shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(n, d.get<uint64_t>(), &n) || n > (uint64_t{1} << 56))
      throw bad("its shape's size overflows");
  }
  const auto& off = e.value("data_offsets", nlohmann::json());
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw bad("data_offsets is not [begin, end]");
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.end < t.begin) throw bad("data_offsets end before they begin");
  if ((n * static_cast<unsigned>(bits)) % 8 != 0) throw bad("its size is not a whole number of bytes");
  const uint64_t bytes = n * static_cast<unsigned>(bits) / 8;
  if (t.end - t.begin != bytes)
    throw bad(fmt::format("data_offsets span {} bytes but shape {} of {} holds {}", t.end - t.begin, e["shape"].dump(),
                          t.dtype, bytes));
  return t;
}

}  // namespace

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path, kSafetensorsWhere) {
  const uint64_t size = file_.size();
  PARALLM_CHECK(size >= 8, IoError, kSafetensorsWhere,
                "{}: {} bytes, too short for a safetensors file (8 bytes of header length)", path, size);
  unsigned char len[8];
  file_.read_at(0, len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  PARALLM_CHECK(n <= kMaxHeader, IoError, kSafetensorsWhere,
                "{}: a header of {} bytes (over 100 MB): not a safetensors file", path, n);
  PARALLM_CHECK(8 + n <= size, IoError, kSafetensorsWhere,
                "{}: the header is {} bytes but the file has only {} after the length: truncated, or not safetensors",
                path, n, size - 8);
  std::string header(n, '\0');
  file_.read_at(8, header.data(), n);
  data_start_ = 8 + n;
  std::set<std::string> keys;
  std::string dup;
  const auto j = nlohmann::json::parse(
      header,
      [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        if (depth == 1 && ev == nlohmann::json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second)
          dup = parsed.get<std::string>();
        return true;
      },
      /*allow_exceptions=*/false);
  PARALLM_CHECK(!j.is_discarded(), IoError, kSafetensorsWhere,
                "{}: the header is not valid JSON: not a safetensors file", path);
  PARALLM_CHECK(j.is_object(), IoError, kSafetensorsWhere, "{}: the header is JSON but not an object", path);
  PARALLM_CHECK(dup.empty(), IoError, kSafetensorsWhere, "{}: the header names \"{}\" twice", path, dup);
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") {
      PARALLM_CHECK(e.is_object(), IoError, kSafetensorsWhere, "{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : e.items()) {
        PARALLM_CHECK(v.is_string(), IoError, kSafetensorsWhere, "{}: __metadata__ \"{}\" is {}, not a string", path, k,
                      v.dump());
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(tensor_of(path, name, e));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const StTensor& a, const StTensor& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  const uint64_t buffer = size - data_start_;
  // A tensor whose offsets lie past the data is named itself (sorted last, it would make the healthy tensors
  // before it look misplaced).
  for (const auto& t : tensors_)
    PARALLM_CHECK(t.end <= buffer, IoError, kSafetensorsWhere,
                  "{}: tensor \"{}\": data_offsets [{}, {}] run past the {} bytes of data the file holds (its "
                  "offsets are wrong, or the file is truncated)",
                  path, t.name, t.begin, t.end, buffer);
  uint64_t at = 0;
  const StTensor* before = nullptr;
  for (const auto& t : tensors_) {
    PARALLM_CHECK(t.begin == at, IoError, kSafetensorsWhere, "{}: tensor \"{}\" starts at byte {} of the data, {}: {}",
                  path, t.name, t.begin,
                  before ? fmt::format("but the tensor before it, \"{}\", ends at byte {}", before->name, at)
                         : "but the first tensor must start at byte 0",
                  t.begin > at ? "a gap before it" : "it overlaps the tensor before it (one of the two is misplaced)");
    at = t.end;
    before = &t;
  }
  PARALLM_CHECK(at == buffer, IoError, kSafetensorsWhere,
                "{}: the tensors cover {} bytes of data but the file holds {} (bytes no tensor owns follow them)", path,
                at, buffer);
}

const StTensor* SafetensorsReader::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsReader::read(const StTensor& t, float* out) const {
  const auto n = static_cast<size_t>(t.numel());
  const size_t at = data_start_ + t.begin;
  if (t.dtype == "F32") {
    file_.read_at(at, out, n * 4);
    return;
  }
  PARALLM_CHECK(t.dtype == "BF16" || t.dtype == "F16", IoError, kSafetensorsWhere,
                "{}: tensor \"{}\" is {}: weights are read from F32, BF16 or F16", path(), t.name, t.dtype);
  std::vector<uint16_t> h(n);
  file_.read_at(at, h.data(), n * 2);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == "F16") {
      out[i] = half_to_float(h[i]);
    } else {
      const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
}

void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const StWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StWrite* a, const StWrite* b) { return a->name < b->name; });
  nlohmann::ordered_json h;
  h["__metadata__"] = nlohmann::ordered_json::object();
  h["__metadata__"]["format"] = "pt";
  for (const auto& [k, v] : metadata) h["__metadata__"][k] = v;
  uint64_t at = 0;
  std::vector<uint64_t> bytes;
  for (const StWrite* t : order) {
    PARALLM_CHECK(!h.contains(t->name), ConfigError, kSafetensorsWhere, "{}: tensor \"{}\" given twice", path, t->name);
    uint64_t n = t->bf16 ? 2 : 4;
    for (int64_t d : t->shape) n *= static_cast<uint64_t>(d);
    h[t->name] = {{"dtype", t->bf16 ? "BF16" : "F32"}, {"shape", t->shape}, {"data_offsets", {at, at + n}}};
    bytes.push_back(n);
    at += n;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  const std::string tmp = path + ".tmp";
  {
    FileWriter w(tmp);
    w.append(len, 8);
    w.append(header.data(), header.size());
    std::vector<uint16_t> half;
    for (size_t i = 0; i < order.size(); ++i) {
      if (!order[i]->bf16) {
        w.append(order[i]->data, bytes[i]);
        continue;
      }
      half.resize(bytes[i] / 2);
      for (size_t e = 0; e < half.size(); ++e) half[e] = f32_to_bf16(order[i]->data[e]);  // little-endian host
      w.append(half.data(), bytes[i]);
    }
    w.finish();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  PARALLM_CHECK(!ec, IoError, kSafetensorsWhere, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

}  // namespace parallm::hf
