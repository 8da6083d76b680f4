#include "data/prepare_bpe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "data/loader.h"

namespace parallm::data {

namespace {

namespace fs = std::filesystem;
constexpr const char* kPrepareWhere = "data.prepare";
constexpr int64_t kWhole = int64_t{1} << 60;  // a chunk size that keeps every text whole

bool printable(char c) {
  return c >= 0x21 && c <= 0x7e;
}
bool letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// The first place p >= from (p + 1 < text.size()) where the pre-tokenizer cuts
// whatever follows: after "\n" between printable ASCII, or before a space
// between ASCII letters; npos if none.
size_t safe_cut(std::string_view t, size_t from) {
  for (size_t p = std::max<size_t>(from, 2); p + 1 < t.size(); ++p) {
    if (t[p - 1] == '\n' && printable(t[p - 2]) && printable(t[p])) return p;
    if (t[p] == ' ' && letter(t[p - 1]) && letter(t[p + 1])) return p;
  }
  return std::string_view::npos;
}

struct Segment {
  std::string path;
  int64_t begin = 0, end = 0;
  bool eot = false;  // the document ends with it: the template's suffix and <|endoftext|> after it
  bool bos = false;  // the document starts with it: the template's prefix (Llama 3's <|begin_of_text|>) before it
};

// A segment's bytes in chunks cut by safe_cut.
class SegmentReader {
 public:
  SegmentReader(const Segment& s, int64_t chunk)
      : file_(s.path, kPrepareWhere), pos_(s.begin), end_(s.end), chunk_(chunk) {}
  // The next chunk and its offset in the file; false once all were given.
  bool next(std::string& out, int64_t& offset) {
    if (pos_ == end_ && buf_.empty()) return false;
    offset = pos_ - static_cast<int64_t>(buf_.size());
    for (size_t from = static_cast<size_t>(chunk_);;) {
      fill(from + static_cast<size_t>(chunk_));
      if (const size_t p = safe_cut(buf_, from); p != std::string::npos) {
        out.assign(buf_, 0, p);
        buf_.erase(0, p);
        return true;
      }
      if (pos_ == end_) {  // the rest, however long
        out = std::move(buf_);
        buf_.clear();
        return true;
      }
      from = buf_.size() - 1;
    }
  }

 private:
  void fill(size_t want) {
    while (buf_.size() < want && pos_ < end_) {
      const auto n = static_cast<size_t>(std::min<int64_t>(end_ - pos_, chunk_));
      const size_t had = buf_.size();
      buf_.resize(had + n);
      const size_t got = file_.read_at(static_cast<size_t>(pos_), buf_.data() + had, n);
      PARALLM_CHECK(got == n, IoError, kPrepareWhere, "{} shrank while it was read (at byte {})", file_.path(),
                    pos_ + got);
      pos_ += static_cast<int64_t>(n);
    }
  }
  RegularFile file_;
  int64_t pos_, end_, chunk_;
  std::string buf_;
};

struct Job {
  std::string text;
  int split = 0;
  bool eot = false;  // the end of a segment that ends a document: no text, the template's suffix, <|endoftext|>
  bool bos = false;  // the start of a document: no text, the template's prefix
  std::string where;
};

// The jobs of every segment of every split, in order.
class JobSource {
 public:
  JobSource(const std::vector<std::vector<Segment>>& splits, int64_t chunk) : splits_(splits), chunk_(chunk) {}
  bool next(Job& j) {
    while (split_ < splits_.size()) {
      const auto& segs = splits_[split_];
      if (seg_ == segs.size()) {
        ++split_, seg_ = 0;
        continue;
      }
      const Segment& s = segs[seg_];
      j = Job{{}, static_cast<int>(split_), false, false, {}};
      if (!reader_) {
        reader_ = std::make_unique<SegmentReader>(s, chunk_);
        if (s.bos) {
          j.bos = true;
          return true;
        }
      }
      int64_t at = 0;
      if (reader_->next(j.text, at)) {
        j.where = fmt::format("{} (bytes {} to {})", s.path, at, at + static_cast<int64_t>(j.text.size()));
        return true;
      }
      reader_.reset();
      ++seg_;
      if (s.eot) {
        j.eot = true;
        return true;
      }
    }
    return false;
  }

 private:
  const std::vector<std::vector<Segment>>& splits_;
  int64_t chunk_;
  size_t split_ = 0, seg_ = 0;
  std::unique_ptr<SegmentReader> reader_;
};

// Encodes jobs[i] into out[i] on `threads` threads; the first failure, with where it was, is rethrown.
void encode_batch(const Bpe& bpe, const std::vector<Job>& jobs, std::vector<std::vector<int32_t>>& out, int threads) {
  out.assign(jobs.size(), {});
  std::vector<std::exception_ptr> errors(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      try {
        if (jobs[i].bos) {
          out[i] = bpe.template_prefix();
        } else if (jobs[i].eot) {
          out[i] = bpe.template_suffix();
          if (out[i].empty() || out[i].back() != bpe.end_of_text()) out[i].push_back(bpe.end_of_text());
        } else {
          out[i] = bpe.encode_ordinary(jobs[i].text);
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(jobs.size())); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const Error& e) {
      throw ConfigError(kPrepareWhere, fmt::format("{}: {}", jobs[i].where, e.message()));
    }
  }
}

int64_t length(const std::vector<Segment>& segs) {
  int64_t n = 0;
  for (const auto& s : segs) n += s.end - s.begin;
  return n;
}

// Deletes the <name>.new files of an unfinished preparation (the dataset there stays as it was).
struct NewFiles {
  fs::path dir;
  bool done = false;
  ~NewFiles() {
    std::error_code ec;
    if (!done)
      for (const char* f : {"train.bin.new", "val.bin.new", "meta.json.new"}) fs::remove(dir / f, ec);
  }
};

// Encodes the splits (train, val) into out_dir's train.bin and val.bin, then writes meta.json.
BpePrepareResult run(const std::vector<std::vector<Segment>>& splits, const std::string& out_dir, const Bpe& bpe,
                     const BpePrepareOptions& o, nlohmann::json meta) {
  PARALLM_CHECK(o.chunk_bytes >= 16, ConfigError, kPrepareWhere, "chunk size {} bytes: at least 16", o.chunk_bytes);
  for (const auto& segs : splits)
    for (const auto& s : segs)
      PARALLM_CHECK(!s.eot || bpe.end_of_text() >= 0, ConfigError, kPrepareWhere,
                    "the tokenizer has no <|endoftext|> (nor <|end_of_text|>) token to end each document with");
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  make_directories(out_dir, kPrepareWhere, "output directory");
  const fs::path dir(out_dir);
  NewFiles cleanup{dir};
  const char* names[] = {"train.bin", "val.bin"};
  std::vector<std::unique_ptr<FileWriter>> files;
  for (const char* n : names) files.push_back(std::make_unique<FileWriter>((dir / (std::string(n) + ".new")).string()));
  Timer timer;
  BpeProgress p;
  p.bytes_total = length(splits[0]) + length(splits[1]);
  int64_t tokens[2] = {0, 0};
  // A tokenizer whose pieces may cross the safe cuts reads each segment whole (one chunk).
  JobSource source(splits, bpe.chunks_at_safe_cuts() ? o.chunk_bytes : kWhole);
  const TokenDtype dtype = token_dtype_for(bpe.vocab_size());
  std::vector<Job> jobs;
  std::vector<std::vector<int32_t>> ids;
  std::vector<uint16_t> u16;
  std::vector<uint32_t> u32;
  for (bool more = true; more;) {
    jobs.clear();
    int64_t bytes = 0;
    for (Job j; bytes < threads * o.chunk_bytes && jobs.size() < 64u * static_cast<size_t>(threads);) {
      if (!(more = source.next(j))) break;
      bytes += static_cast<int64_t>(j.text.size());
      jobs.push_back(std::move(j));
    }
    encode_batch(bpe, jobs, ids, threads);
    for (size_t i = 0; i < jobs.size(); ++i) {
      FileWriter& f = *files[static_cast<size_t>(jobs[i].split)];
      if (dtype == TokenDtype::kU16) {
        u16.assign(ids[i].begin(), ids[i].end());
        f.append(u16.data(), u16.size() * sizeof(uint16_t));
      } else {
        u32.assign(ids[i].begin(), ids[i].end());
        f.append(u32.data(), u32.size() * sizeof(uint32_t));
      }
      tokens[jobs[i].split] += static_cast<int64_t>(ids[i].size());
    }
    p.bytes_done += bytes;
    p.tokens = tokens[0] + tokens[1];
    p.seconds = timer.seconds();
    if (o.progress) o.progress(p);
  }
  for (auto& f : files) f->finish();
  PARALLM_CHECK(tokens[0] > 0 && tokens[1] > 0, ConfigError, kPrepareWhere,
                "the {} split would be empty ({} train and {} val tokens): give more text{}",
                tokens[0] == 0 ? "train" : "val", tokens[0], tokens[1],
                tokens[1] == 0 ? ", or a larger --val_fraction" : "");
  meta["vocab_size"] = bpe.vocab_size();
  meta["tokenizer"] = o.tokenizer_name;
  meta["eot_token"] = bpe.end_of_text();
  meta["train_tokens"] = tokens[0];
  meta["val_tokens"] = tokens[1];
  meta["dtype"] = token_dtype_name(dtype);
  meta["bpe"] = bpe.definition();
  const std::string text = meta.dump(1);
  write_file_atomic((dir / "meta.json.new").string(), {{text.data(), text.size()}});
  std::error_code ec;
  for (const char* f : {"train.bin", "val.bin", "meta.json"}) {
    fs::rename(dir / (std::string(f) + ".new"), dir / f, ec);
    PARALLM_CHECK(!ec, IoError, kPrepareWhere, "cannot rename {}.new to {} in {}: {}", f, f, out_dir, ec.message());
  }
  cleanup.done = true;
  return {p.bytes_total, 0, tokens[0], tokens[1], timer.seconds()};
}

int64_t file_size_of(const std::string& path) {
  return static_cast<int64_t>(RegularFile(path, kPrepareWhere).size());
}

// The byte offset of code point `index` in the file (its size past the last).
int64_t code_point_offset(const std::string& path, int64_t index, int64_t* count) {
  RegularFile f(path, kPrepareWhere);
  std::string buf(1 << 20, '\0');
  int64_t seen = 0, at = -1;
  for (size_t off = 0; off < f.size();) {
    const size_t n = f.read_at(off, buf.data(), buf.size());
    for (size_t i = 0; i < n; ++i) {
      if ((static_cast<unsigned char>(buf[i]) & 0xC0) == 0x80) continue;
      if (seen == index) at = static_cast<int64_t>(off + i);
      ++seen;
    }
    off += n;
  }
  *count = seen;
  return at < 0 ? static_cast<int64_t>(f.size()) : at;
}

// The offset just after the first "\n" at or after `from` (the file's size if none).
int64_t next_line(const std::string& path, int64_t from) {
  RegularFile f(path, kPrepareWhere);
  std::string buf(1 << 16, '\0');
  for (auto off = static_cast<size_t>(from); off < f.size();) {
    const size_t n = f.read_at(off, buf.data(), buf.size());
    if (const size_t nl = std::string_view(buf.data(), n).find('\n'); nl != std::string_view::npos)
      return static_cast<int64_t>(off + nl + 1);
    off += n;
  }
  return static_cast<int64_t>(f.size());
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    PARALLM_CHECK(fs::exists(st), ConfigError, kPrepareWhere, "input {} does not exist", in);
    if (!fs::is_directory(st)) {
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec))
      if (e.is_regular_file()) found.push_back(e.path().string());
    PARALLM_CHECK(!ec, IoError, kPrepareWhere, "cannot list {}: {}", in, ec.message());
    PARALLM_CHECK(!found.empty(), ConfigError, kPrepareWhere, "input directory {} holds no files", in);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  PARALLM_CHECK(!files.empty(), ConfigError, kPrepareWhere, "no input files given");
  return files;
}

void for_each_chunk(const std::vector<std::string>& files, int64_t chunk_bytes,
                    const std::function<void(std::string_view text, const std::string& where)>& fn) {
  std::string text;
  for (const auto& f : files) {
    SegmentReader r({f, 0, file_size_of(f), false}, chunk_bytes);
    for (int64_t at = 0; r.next(text, at);)
      fn(text, fmt::format("{} (bytes {} to {})", f, at, at + static_cast<int64_t>(text.size())));
  }
}

namespace {

// `text` cut into chunks of about `chunk_bytes` by safe_cut.
std::vector<std::string_view> chunks_of(std::string_view text, int64_t chunk_bytes) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start < text.size();) {
    const std::string_view rest = text.substr(start);
    size_t p = rest.size() > static_cast<size_t>(chunk_bytes) ? safe_cut(rest, static_cast<size_t>(chunk_bytes))
                                                              : std::string_view::npos;
    if (p == std::string_view::npos) p = rest.size();
    out.push_back(rest.substr(0, p));
    start += p;
  }
  return out;
}

}  // namespace

std::vector<int32_t> encode_in_chunks(const Bpe& bpe, std::string_view text, int64_t chunk_bytes) {
  if (!bpe.chunks_at_safe_cuts()) chunk_bytes = kWhole;
  std::vector<int32_t> out;
  for (std::string_view c : chunks_of(text, chunk_bytes)) {
    const auto ids = bpe.encode_ordinary(c);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::vector<int32_t> encode_parallel(const Bpe& bpe, std::string_view text, int threads) {
  threads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto chunk = bpe.chunks_at_safe_cuts()
                         ? std::max<int64_t>(4096, static_cast<int64_t>(text.size()) / (4 * threads) + 1)
                         : kWhole;
  const auto parts = chunks_of(text, chunk);
  std::vector<std::vector<int32_t>> ids(parts.size());
  std::vector<std::exception_ptr> errors(parts.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();) {
      try {
        ids[i] = bpe.encode_ordinary(parts[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(parts.size())); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<int32_t> out;
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

BpePrepareResult prepare_bpe_split_text(const std::string& input, const std::string& out_dir, const Bpe& bpe,
                                        const BpePrepareOptions& o) {
  const int64_t size = file_size_of(input);
  int64_t n = 0;
  code_point_offset(input, -1, &n);
  const auto cut_index = static_cast<int64_t>(static_cast<double>(n) * 0.9);  // Python's int(n * 0.9)
  int64_t ignored = 0;
  const int64_t cut = code_point_offset(input, cut_index, &ignored);
  const std::vector<std::vector<Segment>> splits = {{{input, 0, cut, false}}, {{input, cut, size, false}}};
  nlohmann::json meta;
  meta["source"] = nlohmann::json::array({fs::absolute(input).string()});
  meta["split"] = fmt::format(
      "the first 90% of the code points train ({} of {}, {} bytes), the rest val; no "
      "<|endoftext|> (nanoGPT's data/shakespeare/prepare.py)",
      cut_index, n, cut);
  auto r = run(splits, out_dir, bpe, o, std::move(meta));
  r.documents = 1;
  return r;
}

BpePrepareResult prepare_bpe_documents(const std::vector<std::string>& inputs, const std::string& out_dir,
                                       const Bpe& bpe, const BpePrepareOptions& o) {
  PARALLM_CHECK(o.val_fraction > 0 && o.val_fraction < 1, ConfigError, kPrepareWhere,
                "val_fraction {}: expected a fraction in (0, 1), both ends excluded (train and val both need text)",
                o.val_fraction);
  const std::vector<std::string> files = expand_inputs(inputs);
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const auto& f : files) total += sizes.emplace_back(file_size_of(f));
  // Val: from the first line start at or after byte total * (1 - val_fraction) of the inputs laid end to end.
  auto target = static_cast<int64_t>(std::floor(static_cast<double>(total) * (1 - o.val_fraction)));
  size_t i = 0;
  while (i + 1 < files.size() && target >= sizes[i]) target -= sizes[i++];
  const int64_t cut = target == 0 ? 0 : next_line(files[i], target);
  std::vector<std::vector<Segment>> splits(2);
  for (size_t f = 0; f < files.size(); ++f) {
    if (f < i) splits[0].push_back({files[f], 0, sizes[f], true, true});
    if (f > i) splits[1].push_back({files[f], 0, sizes[f], true, true});
  }
  if (cut > 0) splits[0].push_back({files[i], 0, cut, cut == sizes[i], true});
  if (cut < sizes[i]) splits[1].insert(splits[1].begin(), {files[i], cut, sizes[i], true, cut == 0});
  nlohmann::json meta;
  meta["source"] = nlohmann::json::array();
  for (const auto& f : files) meta["source"].push_back(fs::absolute(f).string());
  meta["split"] = fmt::format(
      "each file a document inside the tokenizer's template (if any), followed by its end-of-text token; val from "
      "byte {} of {} on ({} of {} "
      "bytes, from a line start; val_fraction {})",
      cut, files[i], total - length(splits[0]), total, o.val_fraction);
  auto r = run(splits, out_dir, bpe, o, std::move(meta));
  r.documents = static_cast<int64_t>(files.size());
  return r;
}

}  // namespace parallm::data
