// Writes the multilingual test text (tests/data/multilingual_text.h) for the
// oracle scripts, which hand the same bytes to parallm and to the oracles.
// usage: make_text SHAKESPEARE_INPUT UTF8_STRESS OUT [BYTES [js]]   (BYTES: 1000000)
// "js": without the three things where JavaScript's regular expressions differ from tiktoken's (U+0085, U+FEFF,
// 's with the long s), as tests/oracles/tiktoken_ids.cjs does: a text on which js-tiktoken is an oracle too.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "data/multilingual_text.h"

namespace {
std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: make_text SHAKESPEARE_INPUT UTF8_STRESS OUT [BYTES [js]]\n");
    return 2;
  }
  const size_t bytes = argc > 4 ? std::stoul(argv[4]) : 1000000;
  std::string text = parallm::test_util::multilingual_text(bytes, slurp(argv[1]), slurp(argv[2]));
  if (argc > 5 && std::string(argv[5]) == "js") {
    for (const std::string& drop : {std::string("\u0085"), std::string("\ufeff")})
      for (size_t at; (at = text.find(drop)) != std::string::npos;) text.erase(at, drop.size());
    for (size_t at; (at = text.find("'\u017f")) != std::string::npos;) text.replace(at, 3, "'s");
  }
  std::ofstream(argv[3], std::ios::binary) << text;
  std::printf("make_text: %zu bytes to %s\n", text.size(), argv[3]);
  return 0;
}
