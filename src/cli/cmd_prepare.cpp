// `parallm prepare DATASET [--input FILE...] [--out DIR] [--vocab DIR | --tokenizer PATH | --tiktoken FILE] ...`:
// character datasets (shakespeare_char, char) and byte-level BPE ones
// (shakespeare, gpt2, bpe: GPT-2's tokenizer, any tokenizer.json, a tiktoken
// rank file); the data layer does the work (data/prepare.h,
// data/prepare_bpe.h), this file picks the inputs and the tokenizer and shows
// progress.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/log.h"
#include "data/bpe_train.h"
#include "data/gpt2_files.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/prepare_bpe.h"
#include "data/tiktoken.h"

namespace parallm::cli {

namespace {

namespace fs = std::filesystem;

struct PrepareOpts {
  std::string name, out, vocab, tokenizer, tiktoken, encoding, pattern;
  std::vector<std::string> inputs, special;
  int threads = 0;
  double val_fraction = 0.1;
  int64_t vocab_size = 1024;
};

// Tiny Shakespeare at out/input.txt, downloaded when missing.
std::string shakespeare_input(const std::string& out, const std::string& name) {
  const std::string input = (fs::path(out) / "input.txt").string();
  if (fs::exists(input)) return input;
  log::info("downloading tiny Shakespeare to {}", input);
  try {
    data::download_file(data::kShakespeareUrl, input);
  } catch (const IoError& e) {
    throw IoError("prepare", fmt::format("{}\nNo network? Download input.txt elsewhere and pass it with "
                                         "`parallm prepare {} --input path/to/input.txt`",
                                         e.what(), name));
  }
  return input;
}

// "12.3/45.6 MB (27%), 3,456,789 tokens, 8.9 MB/s", redrawn in place on a terminal.
void show(const data::BpeProgress& p, bool tty) {
  const double mb = 1e-6;
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) * mb / p.seconds : 0;
  const std::string line =
      fmt::format("{:.1f}/{:.1f} MB ({:.0f}%), {} tokens, {:.1f} MB/s", static_cast<double>(p.bytes_done) * mb,
                  static_cast<double>(p.bytes_total) * mb,
                  p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100,
                  p.tokens, rate);
  if (tty) std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
}

// --tiktoken FILE with --encoding NAME, or with --pattern REGEX and --special TOKEN=ID...
data::Bpe tiktoken_of(const PrepareOpts& o) {
  PARALLM_CHECK(o.encoding.empty() != o.pattern.empty(), ConfigError, "prepare",
                "--tiktoken needs one of --encoding NAME ({}) and --pattern REGEX",
                fmt::join(data::tiktoken_encoding_names(), ", "));
  data::TiktokenEncoding enc =
      o.encoding.empty() ? data::TiktokenEncoding{"", o.pattern, {}} : data::tiktoken_encoding(o.encoding);
  for (const std::string& s : o.special) {
    const size_t eq = s.rfind('=');
    int64_t id = -1;
    try {
      id = eq == std::string::npos ? -1 : std::stoll(s.substr(eq + 1));
    } catch (const std::exception&) {
    }
    PARALLM_CHECK(eq != std::string::npos && eq > 0 && id >= 0 && id < INT32_MAX, ConfigError, "prepare",
                  "--special {}: expected TOKEN=ID (e.g. \"<|endoftext|>=100257\")", s);
    const std::string token = s.substr(0, eq);
    std::erase_if(enc.special, [&](const auto& p) { return p.first == token; });
    enc.special.emplace_back(token, static_cast<int32_t>(id));
  }
  return data::load_tiktoken(o.tiktoken, enc);
}

// The tokenizer the options name: --tokenizer, --tiktoken, or (--vocab or none) GPT-2's.
data::Bpe tokenizer_of(const PrepareOpts& o, const std::string& out) {
  const int given = !o.vocab.empty() + !o.tokenizer.empty() + !o.tiktoken.empty();
  PARALLM_CHECK(given <= 1, ConfigError, "prepare", "give one of --vocab, --tokenizer and --tiktoken ({} given)",
                given);
  PARALLM_CHECK(o.tiktoken.empty() ? o.encoding.empty() && o.pattern.empty() && o.special.empty() : true, ConfigError,
                "prepare", "--encoding, --pattern and --special go with --tiktoken FILE");
  PARALLM_CHECK(given == 1 || o.name != "bpe", ConfigError, "prepare",
                "dataset \"bpe\" needs its tokenizer: --tokenizer PATH (tokenizer.json or a directory), --tiktoken "
                "FILE --encoding NAME, or --vocab DIR");
  if (!o.tiktoken.empty()) return tiktoken_of(o);
  if (!o.tokenizer.empty()) return data::Bpe::load(o.tokenizer);
  const std::string cache =
      (fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path()) / "gpt2-tokenizer";
  return data::gpt2_tokenizer(o.vocab, cache);
}

int prepare_bpe(const PrepareOpts& o, const std::string& out) {
  const data::Bpe bpe = tokenizer_of(o, out);
  data::BpePrepareOptions po;
  po.tokenizer_name = data::is_gpt2(bpe) ? "gpt2" : bpe.kind();
  const std::string source = !o.tokenizer.empty() ? o.tokenizer : !o.tiktoken.empty() ? o.tiktoken : o.vocab;
  if (po.tokenizer_name != "gpt2")
    log::info("{} is not GPT-2's tokenizer ({}: {} ids, {} merges, {} added tokens{}): the dataset uses it as it is",
              source, bpe.kind(), bpe.vocab_size(), bpe.merges(), bpe.spec().added.size(),
              bpe.template_prefix().empty()
                  ? ""
                  : fmt::format(", documents start with ids {}", fmt::join(bpe.template_prefix(), " ")));
  if (!bpe.chunks_at_safe_cuts())
    log::info("its pre-tokenizer is not one whose cuts are known: each input file is encoded whole, on one thread");
  po.threads = o.threads;
  po.val_fraction = o.val_fraction;
  const bool tty = ::isatty(STDERR_FILENO);
  po.progress = [tty](const data::BpeProgress& p) { show(p, tty); };
  data::BpePrepareResult r;
  if (o.name == "shakespeare") {
    const std::string input = o.inputs.empty() ? shakespeare_input(out, o.name) : o.inputs.front();
    r = data::prepare_bpe_split_text(input, out, bpe, po);
  } else {
    PARALLM_CHECK(!o.inputs.empty(), ConfigError, "prepare", "dataset \"{}\" needs --input FILE_OR_DIR...", o.name);
    r = data::prepare_bpe_documents(o.inputs, out, bpe, po);
  }
  if (tty) std::fputc('\n', stderr);
  const double bytes = static_cast<double>(r.bytes), tokens = static_cast<double>(r.train_tokens + r.val_tokens);
  log::info("{} bytes in {} document(s) -> {} tokens ({:.3f} bytes a token) in {:.2f} s ({:.1f} MB/s, {} threads)",
            r.bytes, r.documents, r.train_tokens + r.val_tokens, bytes / tokens, r.seconds, bytes * 1e-6 / r.seconds,
            po.threads > 0 ? po.threads : static_cast<int>(std::thread::hardware_concurrency()));
  log::info("train has {} tokens", r.train_tokens);
  log::info("val has {} tokens", r.val_tokens);
  log::info("wrote {}/train.bin, val.bin, meta.json (tokenizer {}, vocab size {}, {} ids)", out, po.tokenizer_name,
            bpe.vocab_size(), data::token_dtype_name(data::token_dtype_for(bpe.vocab_size())));
  return 0;
}

// Trains a BPE on the inputs, writes it, and checks it on them: every line
// round-trips, and the bytes a token it gives.
int prepare_bpe_train(const PrepareOpts& o, const std::string& out) {
  PARALLM_CHECK(!o.inputs.empty(), ConfigError, "prepare", "bpe-train needs --input FILE_OR_DIR...");
  const auto r = data::train_bpe(o.inputs, o.vocab_size);
  data::write_bpe_files(r.bpe, out);
  log::info(
      "trained a {}-token BPE ({} merges) on {} bytes ({} pieces, {} distinct) in {:.2f} s (counting {:.2f} s, "
      "merging {:.2f} s)",
      r.bpe.vocab_size(), r.bpe.merges(), r.bytes, r.pieces, r.distinct, r.count_seconds + r.merge_seconds,
      r.count_seconds, r.merge_seconds);
  if (r.bpe.vocab_size() < o.vocab_size)
    log::warn(
        "the corpus ran out of pairs to merge: {} tokens, fewer than --vocab_size {} (every piece of it is one "
        "token now)",
        r.bpe.vocab_size(), o.vocab_size);
  int64_t lines = 0, tokens = 0;
  data::for_each_chunk(data::expand_inputs(o.inputs), int64_t{4} << 20,
                       [&](std::string_view text, const std::string& where) {
                         for (size_t start = 0; start < text.size();) {
                           const size_t end = std::min(text.find('\n', start), text.size() - 1) + 1;
                           const std::string_view line = text.substr(start, end - start);
                           const auto ids = r.bpe.encode_ordinary(line);
                           PARALLM_CHECK(r.bpe.decode(ids) == line, InternalError, "prepare",
                                         "{}: the line at byte {} does not round-trip", where, start);
                           tokens += static_cast<int64_t>(ids.size());
                           ++lines;
                           start = end;
                         }
                       });
  log::info("on its corpus: {} bytes -> {} tokens, {:.3f} bytes a token; all {} lines round-trip", r.bytes, tokens,
            static_cast<double>(r.bytes) / static_cast<double>(tokens), lines);
  log::info("wrote {}/vocab.json, merges.txt and tokenizer.json (use: parallm prepare bpe --tokenizer {} --input ...)",
            out, out);
  return 0;
}

int prepare_char(const PrepareOpts& o, const std::string& out) {
  std::string input = o.inputs.empty() ? "" : o.inputs.front();
  if (input.empty()) {
    PARALLM_CHECK(o.name == "shakespeare_char", ConfigError, "prepare", "dataset \"char\" needs --input FILE");
    input = shakespeare_input(out, o.name);
  }
  auto r = data::prepare_char_dataset(input, out);
  log::info("length of dataset in characters: {}", r.chars);
  log::info("vocab size: {}", r.vocab_size);
  log::info("train has {} tokens", r.train_tokens);
  log::info("val has {} tokens", r.val_tokens);
  log::info("wrote {}/train.bin, val.bin, meta.json", out);
  return 0;
}

}  // namespace

Runner add_prepare(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "Prepare a dataset (train.bin, val.bin, meta.json)");
  auto o = std::make_shared<PrepareOpts>();
  cmd->add_option("dataset", o->name,
                  "shakespeare_char (characters; downloads the corpus unless --input), char (characters of any "
                  "text), shakespeare (GPT-2 tokens, as nanoGPT's data/shakespeare), gpt2 (GPT-2 tokens of any "
                  "files, each a document ended by <|endoftext|>), bpe (the same with the tokenizer that --tokenizer, "
                  "--tiktoken or --vocab names; each document inside the tokenizer's template, e.g. Llama 3's "
                  "<|begin_of_text|>, then its end-of-text token), bpe-train (trains a byte-level BPE on the inputs: "
                  "vocab.json + merges.txt and tokenizer.json in --out)")
      ->required()
      ->check(CLI::IsMember({"shakespeare_char", "char", "shakespeare", "gpt2", "bpe", "bpe-train"}));
  cmd->add_option("--input", o->inputs,
                  "UTF-8 text to use instead of downloading (gpt2: files and directories, one or more)");
  cmd->add_option("--out", o->out, "output directory (default data/<dataset>)");
  cmd->add_option("--vocab", o->vocab,
                  "BPE datasets: a directory with the tokenizer (encoder.json + vocab.bpe, vocab.json + merges.txt, "
                  "or tokenizer.json); default: GPT-2's, downloaded once next to the output directory");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "BPE datasets: Hugging Face's tokenizer.json (byte-level BPE: GPT-2's, Llama 3's, Qwen2's kind), or "
                  "a directory as --vocab; token files hold uint32 ids when it has more than 65,536");
  cmd->add_option("--tiktoken", o->tiktoken,
                  "BPE datasets: a tiktoken rank file (\"<base64 token> <rank>\" lines, e.g. cl100k_base.tiktoken), "
                  "with --encoding or --pattern");
  cmd->add_option("--encoding", o->encoding, "--tiktoken: the encoding whose pattern and special tokens it has")
      ->check(CLI::IsMember(data::tiktoken_encoding_names()));
  cmd->add_option("--pattern", o->pattern, "--tiktoken: the pre-tokenizer's pattern (PCRE2), instead of --encoding");
  cmd->add_option("--special", o->special,
                  "--tiktoken: a special token and its id, TOKEN=ID (repeat; adds to or replaces the encoding's)");
  cmd->add_option("--threads", o->threads, "BPE datasets: encoding threads (0 = every core)")
      ->check(int_in(0, 4096))
      ->capture_default_str();
  cmd->add_option("--vocab_size", o->vocab_size, "bpe-train: tokens in the vocabulary, <|endoftext|> included")
      ->check(int_in(257, 65536))
      ->capture_default_str();
  cmd->add_option("--val_fraction", o->val_fraction, "gpt2: the share of the input held out for validation")
      ->check(number_in(0, 1, /*lo_open=*/true, /*hi_open=*/true))
      ->capture_default_str();
  return [o]() {
    const std::string out = o->out.empty() ? "data/" + o->name : o->out;
    if (o->name == "bpe-train") return prepare_bpe_train(*o, out);
    PARALLM_CHECK(o->inputs.size() <= 1 || o->name == "gpt2" || o->name == "bpe", ConfigError, "prepare",
                  "dataset \"{}\" takes one --input file ({} given)", o->name, o->inputs.size());
    const bool bpe = o->name == "shakespeare" || o->name == "gpt2" || o->name == "bpe";
    PARALLM_CHECK(bpe || (o->vocab.empty() && o->tokenizer.empty() && o->tiktoken.empty()), ConfigError, "prepare",
                  "--vocab, --tokenizer and --tiktoken are for BPE datasets (shakespeare, gpt2, bpe); \"{}\" is a "
                  "character dataset",
                  o->name);
    return bpe ? prepare_bpe(*o, out) : prepare_char(*o, out);
  };
}

}  // namespace parallm::cli
