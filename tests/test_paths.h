// Where the tests' own files lie (golden values, text fixtures): $PARALLM_TEST_DIR when set, else the tests/ of
// the source tree the build was configured from (PARALLM_TEST_DIR, compiled in), else tests/ under the working
// directory (a build carried to another machine and run from a copy of the repository, as on the lent GPU
// machine, where the compiled-in path does not exist).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace parallm::test {

inline std::string test_dir() {
  if (const char* e = std::getenv("PARALLM_TEST_DIR"); e && *e) return e;
  if (std::filesystem::exists(PARALLM_TEST_DIR)) return PARALLM_TEST_DIR;
  if (std::filesystem::exists("tests/golden")) return std::filesystem::absolute("tests").string();
  return PARALLM_TEST_DIR;  // the error that follows names it
}

}  // namespace parallm::test
