// `parallm prepare shakespeare_char|char [--input FILE] [--out DIR]`
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/prepare.h"

namespace parallm::cli {

Runner add_prepare(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "Prepare a character-level dataset (train.bin, val.bin, meta.json)");
  struct Opts {
    std::string name, input, out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dataset", o->name, "shakespeare_char (downloads the corpus unless --input) or char (any text)")
      ->required()
      ->check(CLI::IsMember({"shakespeare_char", "char"}));
  cmd->add_option("--input", o->input, "UTF-8 text file to use instead of downloading");
  cmd->add_option("--out", o->out, "output directory (default data/<dataset>)");
  return [o]() {
    namespace fs = std::filesystem;
    const std::string out = o->out.empty() ? "data/" + o->name : o->out;
    std::string input = o->input;
    if (input.empty()) {
      PARALLM_CHECK(o->name == "shakespeare_char", ConfigError, "prepare", "dataset \"char\" needs --input FILE");
      input = (fs::path(out) / "input.txt").string();
      if (!fs::exists(input)) {
        log::info("downloading tiny Shakespeare to {}", input);
        try {
          data::download_file(data::kShakespeareUrl, input);
        } catch (const IoError& e) {
          throw IoError("prepare", fmt::format("{}\nNo network? Download input.txt elsewhere and pass it with "
                                               "`parallm prepare shakespeare_char --input path/to/input.txt`",
                                               e.what()));
        }
      }
    }
    auto r = data::prepare_char_dataset(input, out);
    log::info("length of dataset in characters: {}", r.chars);
    log::info("vocab size: {}", r.vocab_size);
    log::info("train has {} tokens", r.train_tokens);
    log::info("val has {} tokens", r.val_tokens);
    log::info("wrote {}/train.bin, val.bin, meta.json", out);
    return 0;
  };
}

}  // namespace parallm::cli
