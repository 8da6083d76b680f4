// The message of the parallm::Error (or of the narrower E) a callable throws
// ("" when it throws none): tests check that errors name their key or entry.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace parallm::test_util {

template <class E = Error>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace parallm::test_util
