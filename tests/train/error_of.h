// The message of the parallm::Error a callable throws ("" when it throws
// none): the config and control tests check that errors name their key.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace parallm::test_util {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace parallm::test_util
