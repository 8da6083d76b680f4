// Hugging Face's tokenizer.json, read into a data::Bpe and written back: the
// BPE model (vocab, merges as "a b" or ["a", "b"], ignore_merges), the
// normalizer (none or NFC), the pre-tokenizer (ByteLevel, alone or after
// Splits with behavior Isolated, and Digits), added tokens with their flags,
// the post-processor (ByteLevel, TemplateProcessing, a Sequence of them) and
// the ByteLevel decoder. Anything else is refused, naming the file and the
// field, rather than tokenized differently from Hugging Face: a tokenizer
// that is not byte-level BPE (WordPiece, Unigram, SentencePiece's Metaspace
// or byte fallback), other normalizers, Split behaviors or processors.
// Truncation and padding shape batches, not a text's ids, and are ignored. A
// file of the model alone (no pre_tokenizer key), as parallm read it before,
// is GPT-2's kind.
#include <unordered_map>

#include "core/error.h"
#include "data/bpe.h"
#include "data/prepare.h"
#include "data/tiktoken.h"

namespace parallm::data {

namespace {

constexpr const char* kJsonWhere = "data.tokenizer_json";
using json = nlohmann::json;

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

[[noreturn]] void unsupported(const std::string& what, const std::string& field, const std::string& why) {
  throw ConfigError(kJsonWhere, fmt::format("{}: {} {}; parallm reads byte-level BPE tokenizers (GPT-2's, Llama 3's, "
                                            "Qwen2's kind) and refuses what it would not tokenize as Hugging Face does",
                                            what, field, why));
}

bool flag(const json& j, const char* key, bool otherwise) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : otherwise;
}

// A PCRE2 pattern matching `s` literally.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) out += '\\';
    out += c;
  }
  return out;
}

void read_normalizer(const json& n, BpeSpec& spec, const std::string& what) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const auto& m : n["normalizers"]) read_normalizer(m, spec, what);
  } else {
    unsupported(what, "normalizer", fmt::format("of type \"{}\" is not supported (only none or NFC)", type));
  }
  spec.normalizer = n;
}

void read_pre_tokenizer(const json& p, BpeSpec& spec, const std::string& what) {
  PARALLM_CHECK(!p.is_null(), ConfigError, kJsonWhere,
                "{}: pre_tokenizer is null: not a byte-level BPE (expected ByteLevel, alone or after Splits)", what);
  const json list = type_of(p) == "Sequence" && p.contains("pretokenizers") ? p["pretokenizers"] : json::array({p});
  PARALLM_CHECK(list.is_array(), IoError, kJsonWhere, "{}: pre_tokenizer.pretokenizers is not a list", what);
  bool byte_level = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& l = list[i];
    const std::string type = type_of(l), field = fmt::format("pre_tokenizer {} ({})", i, type);
    if (byte_level) unsupported(what, field, "comes after ByteLevel, which must be the last");
    if (type == "Split") {
      const json& pat = l.value("pattern", json());
      const bool regex = pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string();
      const bool literal = pat.is_object() && pat.contains("String") && pat["String"].is_string();
      PARALLM_CHECK(regex || literal, IoError, kJsonWhere,
                    "{}: {} has no pattern {{\"Regex\": ...}} or {{\"String\": ...}}", what, field);
      if (l.value("behavior", "") != "Isolated")
        unsupported(what, field, fmt::format("has behavior \"{}\" (only Isolated)", l.value("behavior", "")));
      if (flag(l, "invert", false)) unsupported(what, field, "has invert: true");
      spec.pre.add_regex(regex ? pat["Regex"].get<std::string>() : escape_literal(pat["String"].get<std::string>()),
                         what + " " + field);
    } else if (type == "Digits") {
      spec.pre.add_regex(flag(l, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", what + " " + field);
    } else if (type == "ByteLevel") {
      byte_level = true;
      spec.add_prefix_space = flag(l, "add_prefix_space", true);
      if (spec.add_prefix_space && !spec.pre.empty())
        unsupported(what, field, "adds a prefix space after a Split (supported only as the first pre-tokenizer)");
      if (flag(l, "use_regex", true)) spec.pre.add_gpt2();
    } else {
      unsupported(what, field, "is not supported (only Split, Digits and ByteLevel)");
    }
  }
  if (!byte_level) unsupported(what, "pre_tokenizer", "has no ByteLevel: not a byte-level BPE");
  spec.pre_tokenizer = p;
}

// TemplateProcessing's "single": the special tokens' ids before and after $A.
void read_template(const json& t, BpeSpec& spec, const std::string& what) {
  PARALLM_CHECK(t.contains("single") && t["single"].is_array(), IoError, kJsonWhere,
                "{}: post_processor TemplateProcessing has no \"single\" list", what);
  bool seen_a = false;
  for (const auto& item : t["single"]) {
    if (item.contains("Sequence")) {
      seen_a = true;
      continue;
    }
    const std::string name = item.contains("SpecialToken") ? item["SpecialToken"].value("id", "") : "";
    const json& st = t.value("special_tokens", json::object());
    PARALLM_CHECK(!name.empty() && st.contains(name) && st[name].contains("ids") && st[name]["ids"].is_array(), IoError,
                  kJsonWhere, "{}: post_processor template item {} names no special token with ids", what, item.dump());
    for (const auto& id : st[name]["ids"]) (seen_a ? spec.suffix : spec.prefix).push_back(id.get<int32_t>());
  }
  PARALLM_CHECK(seen_a, IoError, kJsonWhere, "{}: post_processor template has no $A (the text)", what);
}

void read_post_processor(const json& p, BpeSpec& spec, const std::string& what) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const auto& q : p["processors"]) read_post_processor(q, spec, what);
  } else if (type == "TemplateProcessing") {
    read_template(p, spec, what);
  } else if (type != "ByteLevel") {
    unsupported(what, "post_processor",
                fmt::format("of type \"{}\" is not supported (only ByteLevel and "
                            "TemplateProcessing, or a Sequence of them)",
                            type));
  }
  spec.post_processor = p;
}

void read_decoder(const json& d, BpeSpec& spec, const std::string& what) {
  if (d.is_null()) return;
  const std::string type = type_of(d);
  if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& e : d["decoders"]) read_decoder(e, spec, what);
  } else if (type != "ByteLevel") {
    unsupported(what, "decoder", fmt::format("of type \"{}\" is not supported (only ByteLevel)", type));
  }
  spec.decoder = d;
}

void check_model_fields(const json& m, const std::string& what) {
  if (m.contains("type") && type_of(m) != "BPE")
    unsupported(what, "model", fmt::format("of type \"{}\" is not supported (only BPE)", type_of(m)));
  const auto nonempty = [&](const char* key) { return m.contains(key) && !m[key].is_null() && m[key] != ""; };
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"] != 0)
    unsupported(what, "model.dropout", fmt::format("is {} (BPE dropout samples ids; only null)", m["dropout"].dump()));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (nonempty(key)) unsupported(what, std::string("model.") + key, "is set (a byte-level BPE has none)");
  if (flag(m, "byte_fallback", false))
    unsupported(what, "model.byte_fallback", "is true (SentencePiece's kind of BPE, not byte-level)");
}

// The vocabulary's (text, id) pairs and the merges as texts.
void read_model_lists(const json& m, const std::string& what, std::vector<std::pair<std::string, int32_t>>& vocab,
                      std::vector<std::pair<std::string, std::string>>& merges) {
  PARALLM_CHECK(m.contains("vocab") && m["vocab"].is_object() && m.contains("merges") && m["merges"].is_array(),
                IoError, kJsonWhere, "{}: the model has no vocab object or merges list", what);
  for (const auto& [token, id] : m["vocab"].items()) {
    PARALLM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, IoError,
                  kJsonWhere, "{} model.vocab: token \"{}\" has id {}, not an integer in [0, 2^31)", what, token,
                  id.dump());
    vocab.emplace_back(token, id.get<int32_t>());
  }
  size_t number = 0;
  for (const auto& e : m["merges"]) {  // "a b" (all versions) or ["a", "b"] (tokenizers >= 0.20)
    ++number;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      PARALLM_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                        s.find(' ', space + 1) == std::string::npos,
                    IoError, kJsonWhere, "{} model.merges line {}: \"{}\" is not two tokens separated by one space",
                    what, number, s);
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      PARALLM_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), IoError, kJsonWhere,
                    "{}: model.merges entry {} is {}, neither \"a b\" nor [\"a\", \"b\"]", what, number, e.dump());
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
}

std::vector<AddedToken> read_added(const json& a, const std::string& what) {
  std::vector<AddedToken> out;
  if (a.is_null()) return out;
  PARALLM_CHECK(a.is_array(), IoError, kJsonWhere, "{}: added_tokens is not a list", what);
  for (const auto& t : a) {
    PARALLM_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 &&
                      t["id"].get<int64_t>() < INT32_MAX && t.contains("content") && t["content"].is_string() &&
                      !t["content"].get<std::string>().empty(),
                  IoError, kJsonWhere, "{}: added token {} has no id in [0, 2^31) and non-empty content", what,
                  t.dump());
    AddedToken x{t["content"].get<std::string>(),
                 t["id"].get<int32_t>(),
                 flag(t, "special", false),
                 flag(t, "single_word", false),
                 flag(t, "lstrip", false),
                 flag(t, "rstrip", false),
                 flag(t, "normalized", !flag(t, "special", false))};
    check_utf8(x.content, what + " added token");
    out.push_back(std::move(x));
  }
  return out;
}

// Whether the tokenizer is GPT-2's kind, which its model object says all of (from_lists makes it again):
// GPT-2's pattern and nothing around it but <|endoftext|>, a token of the model, without flags that matter.
bool plain(const BpeSpec& s, const std::vector<bool>& model) {
  if (s.nfc || s.add_prefix_space || s.ignore_merges || !s.prefix.empty() || !s.suffix.empty()) return false;
  if (s.pre.patterns() != std::vector<std::string>{kGpt2Pattern} || s.added.size() > 1) return false;
  for (const auto& a : s.added)
    if (a.content != "<|endoftext|>" || !model[static_cast<size_t>(a.id)] || a.single_word || a.lstrip || a.rstrip)
      return false;
  return true;
}

// The tokens (id -> bytes), which are the model's, and the merges, from the lists and the added tokens.
Bpe build(const std::vector<std::pair<std::string, int32_t>>& vocab,
          const std::vector<std::pair<std::string, std::string>>& merges, BpeSpec spec, const std::string& what) {
  std::unordered_map<char32_t, char> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[byte_to_unicode()[static_cast<size_t>(b)]] = static_cast<char>(b);
  int64_t size = 0;
  for (const auto& v : vocab) size = std::max<int64_t>(size, v.second + 1);
  for (const auto& a : spec.added) size = std::max<int64_t>(size, a.id + 1);
  std::vector<std::string> tokens(static_cast<size_t>(size));
  std::vector<bool> model(static_cast<size_t>(size));
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [token, id] : vocab) {
    PARALLM_CHECK(!model[static_cast<size_t>(id)], IoError, kJsonWhere,
                  "{}: id {} is given to two tokens (one is \"{}\")", what, id, token);
    std::string bytes;
    for (char32_t cp : decode_utf8(token, what)) {
      const auto it = to_byte.find(cp);
      PARALLM_CHECK(it != to_byte.end(), IoError, kJsonWhere,
                    "{}: token \"{}\" (id {}) has U+{:04X}, which is not in the byte-level alphabet", what, token, id,
                    static_cast<uint32_t>(cp));
      bytes += it->second;
    }
    tokens[static_cast<size_t>(id)] = bytes;
    model[static_cast<size_t>(id)] = true;
    id_of.emplace(token, id);
  }
  for (const auto& a : spec.added) {
    const auto it = id_of.find(a.content);
    if (it != id_of.end()) {
      PARALLM_CHECK(it->second == a.id, IoError, kJsonWhere,
                    "{}: added token \"{}\" has id {} but the vocabulary's is {} (an inconsistent file: Hugging Face "
                    "would renumber the added tokens)",
                    what, a.content, a.id, it->second);
      continue;
    }
    PARALLM_CHECK(tokens[static_cast<size_t>(a.id)].empty(), IoError, kJsonWhere,
                  "{}: added token \"{}\" has id {}, which another token has", what, a.content, a.id);
    tokens[static_cast<size_t>(a.id)] = a.content;
  }
  std::vector<Bpe::MergeRule> rules;
  rules.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    PARALLM_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(), IoError, kJsonWhere,
                  "{}: merge {} (\"{} {}\") names a token that is not in the vocabulary (\"{}\")", what, r + 1, a, b,
                  ia == id_of.end()   ? a
                  : ib == id_of.end() ? b
                                      : a + b);
    rules.push_back({ia->second, ib->second, static_cast<int32_t>(r), iab->second});
  }
  if (plain(spec, model)) {  // as from_lists makes it (without a normalizer, normalized changes nothing)
    spec.kind = "bpe";
    for (auto& a : spec.added) a = AddedToken{a.content, a.id};
    spec.normalizer = spec.pre_tokenizer = spec.post_processor = spec.decoder = json();
  } else {
    spec.kind = "tokenizer.json";
  }
  return Bpe::assemble(std::move(tokens), std::move(model), rules, std::move(spec), what);
}

}  // namespace

Bpe Bpe::from_tokenizer_json(const json& j, const std::string& what) {
  PARALLM_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), IoError, kJsonWhere,
                "{}: expected \"model\": {{\"type\": \"BPE\", ...}}", what);
  const json& m = j["model"];
  check_model_fields(m, what);
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  read_model_lists(m, what, vocab, merges);
  BpeSpec spec;
  spec.ignore_merges = flag(m, "ignore_merges", false);
  read_normalizer(j.value("normalizer", json()), spec, what);
  if (j.contains("pre_tokenizer"))
    read_pre_tokenizer(j["pre_tokenizer"], spec, what);
  else
    spec.pre.add_gpt2();  // a file of the model alone, as parallm read it before: GPT-2's
  read_post_processor(j.value("post_processor", json()), spec, what);
  read_decoder(j.value("decoder", json()), spec, what);
  spec.added = read_added(j.value("added_tokens", json()), what);
  if (!j.contains("added_tokens") && m["vocab"].contains("<|endoftext|>"))  // the same: GPT-2's special token
    spec.added.push_back({"<|endoftext|>", m["vocab"]["<|endoftext|>"].get<int32_t>()});
  const int32_t top =
      std::max_element(vocab.begin(), vocab.end(), [](auto& a, auto& b) { return a.second < b.second; })->second;
  for (int32_t id : spec.prefix)
    PARALLM_CHECK(id >= 0 && (id <= top || std::any_of(spec.added.begin(), spec.added.end(),
                                                       [&](const AddedToken& a) { return a.id == id; })),
                  IoError, kJsonWhere, "{}: the post_processor's template names id {}, which no token has", what, id);
  return build(vocab, merges, std::move(spec), what);
}

Bpe Bpe::from_model_json(const json& model, const std::string& what) {
  PARALLM_CHECK(model.is_object() && model.value("type", "") == "BPE", IoError, kJsonWhere,
                "{}: expected a model {{\"type\": \"BPE\", ...}}", what);
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  read_model_lists(model, what, vocab, merges);
  return from_lists(vocab, merges, what);
}

json Bpe::tokenizer_json() const {
  const BpeSpec& s = spec();
  json added = json::array();
  for (const auto& a : s.added)
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", a.single_word},
                     {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip},
                     {"normalized", a.normalized},
                     {"special", a.special}});
  const auto byte_level = [](bool prefix, bool trim) {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", trim}, {"use_regex", true}};
  };
  json model = model_json();
  json out = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", std::move(added)}};
  out["normalizer"] = s.normalizer;
  out["pre_tokenizer"] = s.pre_tokenizer.is_null() ? byte_level(false, true) : s.pre_tokenizer;
  out["post_processor"] = s.post_processor.is_null() ? byte_level(true, false) : s.post_processor;
  out["decoder"] = s.decoder.is_null() ? byte_level(true, true) : s.decoder;
  out["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", s.ignore_merges},
                  {"vocab", std::move(model["vocab"])},
                  {"merges", std::move(model["merges"])}};
  return out;
}

json Bpe::definition() const {
  if (kind() == "tiktoken") return tiktoken_definition(*this);
  if (kind() == "tokenizer.json") return tokenizer_json();
  return model_json();
}

Bpe Bpe::from_definition(const json& j, const std::string& what) {
  if (j.is_object() && j.contains("model")) return from_tokenizer_json(j, what);
  if (type_of(j) == "tiktoken") return tiktoken_from_definition(j, what);
  return from_model_json(j, what);
}

}  // namespace parallm::data
