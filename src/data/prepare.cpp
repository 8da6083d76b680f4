#include "data/prepare.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/fileio.h"
#include "data/loader.h"

namespace parallm::data {

namespace fs = std::filesystem;

const char* const kShakespeareUrl =
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt";

// Strict UTF-8, as Python decodes it: no overlong forms, no surrogates, nothing above U+10FFFF.
std::vector<char32_t> decode_utf8(const std::string& s, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    PARALLM_CHECK(len > 0 && i + len <= s.size(), ConfigError, "data.utf8",
                  "{} is not valid UTF-8: bad byte 0x{:02x} at offset {}", what, c, i);
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      PARALLM_CHECK((cc & 0xC0) == 0x80, ConfigError, "data.utf8",
                    "{} is not valid UTF-8: bad continuation byte 0x{:02x} at offset {}", what, cc, i + k);
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};  // the least code point of each length
    PARALLM_CHECK(cp >= kMin[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF), ConfigError, "data.utf8",
                  "{} is not valid UTF-8: {} at offset {}", what,
                  cp < kMin[len]  ? "an overlong encoding"
                  : cp > 0x10FFFF ? "a code point above U+10FFFF"
                                  : fmt::format("a surrogate (U+{:04X})", static_cast<uint32_t>(cp)),
                  i);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string encode_utf8(char32_t cp) {
  std::string r;
  if (cp < 0x80) {
    r += static_cast<char>(cp);
  } else if (cp < 0x800) {
    r += static_cast<char>(0xC0 | (cp >> 6));
    r += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    r += static_cast<char>(0xE0 | (cp >> 12));
    r += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    r += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    r += static_cast<char>(0xF0 | (cp >> 18));
    r += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    r += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    r += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return r;
}

PrepareResult prepare_char_dataset(const std::string& input_path, const std::string& out_dir) {
  std::error_code ec;
  PARALLM_CHECK(!fs::is_directory(input_path, ec), IoError, "data.prepare", "input {} is a directory, not a text file",
                input_path);
  std::ifstream in(input_path, std::ios::binary);
  PARALLM_CHECK(in.good(), IoError, "data.prepare", "cannot read input file {}", input_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto text = decode_utf8(bytes, input_path);
  PARALLM_CHECK(text.size() >= 2, ConfigError, "data.prepare", "input file {} has {} characters; need at least 2",
                input_path, text.size());
  std::set<char32_t> uniq(text.begin(), text.end());
  std::vector<char32_t> itos(uniq.begin(), uniq.end());
  // uint16 ids as nanoGPT's (up to 65,536 characters), uint32 above.
  const TokenDtype dtype = token_dtype_for(static_cast<int64_t>(itos.size()));
  const size_t w = token_dtype_bytes(dtype);
  std::vector<uint16_t> u16;
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ids[i] = static_cast<uint32_t>(std::lower_bound(itos.begin(), itos.end(), text[i]) - itos.begin());
  if (dtype == TokenDtype::kU16) u16.assign(ids.begin(), ids.end());
  const char* data =
      dtype == TokenDtype::kU16 ? reinterpret_cast<const char*>(u16.data()) : reinterpret_cast<const char*>(ids.data());
  const size_t n_train = static_cast<size_t>(static_cast<double>(text.size()) * 0.9);  // int(n*0.9), as prepare.py

  nlohmann::json meta;
  meta["format"] = "parallm-char-v1";
  meta["vocab_size"] = itos.size();
  meta["dtype"] = token_dtype_name(dtype);
  std::vector<std::string> itos_s;
  for (char32_t cp : itos) itos_s.push_back(encode_utf8(cp));
  meta["itos"] = itos_s;
  meta["source"] = fs::absolute(input_path).string();
  meta["train_tokens"] = n_train;
  meta["val_tokens"] = ids.size() - n_train;
  const std::string ms = meta.dump(1);

  // All three files are complete on disk (as .new) before any replaces its
  // predecessor, so a failed write leaves the old dataset; the loader checks
  // the sizes against meta.json in any case.
  make_directories(out_dir, "data.prepare", "output directory");
  const fs::path dir(out_dir);
  try {
    write_file_atomic((dir / "train.bin.new").string(), {{data, n_train * w}});
    write_file_atomic((dir / "val.bin.new").string(), {{data + n_train * w, (ids.size() - n_train) * w}});
    write_file_atomic((dir / "meta.json.new").string(), {{ms.data(), ms.size()}});
  } catch (...) {
    for (const char* f : {"train.bin.new", "val.bin.new", "meta.json.new"}) fs::remove(dir / f, ec);
    throw;
  }
  for (const char* f : {"train.bin", "val.bin", "meta.json"}) {
    fs::rename(dir / (std::string(f) + ".new"), dir / f, ec);
    PARALLM_CHECK(!ec, IoError, "data.prepare", "cannot rename {}.new to {} in {}: {}", f, f, out_dir, ec.message());
  }
  return {static_cast<int64_t>(text.size()), static_cast<int64_t>(itos.size()), static_cast<int64_t>(n_train),
          static_cast<int64_t>(ids.size() - n_train)};
}

nlohmann::json read_dataset_meta(const std::string& dir) {
  PARALLM_CHECK(!dir.empty(), ConfigError, "data.meta",
                "no dataset directory given (data.dir is empty): set data.dir to a prepared dataset, e.g. one made by "
                "`parallm prepare shakespeare_char --out data/shakespeare_char`");
  const std::string path = (fs::path(dir) / "meta.json").string();
  std::error_code ec;
  PARALLM_CHECK(fs::exists(fs::symlink_status(path, ec)), IoError, "data.meta",
                "no {}: prepare the dataset first (`parallm prepare shakespeare_char --out {}`), or set data.dir to a "
                "prepared dataset",
                path, dir);
  auto meta = nlohmann::json::parse(read_text_file(path, "data.meta"), nullptr, false);
  PARALLM_CHECK(meta.is_object(), IoError, "data.meta", "{} is not a JSON object: prepare the dataset again", path);
  return meta;
}

void download_file(const std::string& url, const std::string& path) {
  CURL* curl = curl_easy_init();
  PARALLM_CHECK(curl, IoError, "data.download", "cannot initialize libcurl");
  std::string body;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 15L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 120L);
  curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* p, size_t sz, size_t n, void* ud) -> size_t {
        static_cast<std::string*>(ud)->append(p, sz * n);
        return sz * n;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  PARALLM_CHECK(rc == CURLE_OK, IoError, "data.download", "could not download {}: {}", url,
                errbuf[0] ? errbuf : curl_easy_strerror(rc));
  fs::create_directories(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path());
  write_file_atomic(path, {{body.data(), body.size()}});
}

}  // namespace parallm::data
