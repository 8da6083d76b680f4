// Count tests (test_tp_counts, test_cp_counts): a failed EXPECT_EQ on
// comm::OpCounts prints both readings as text ("all_reduce 3 calls 27648 B").
#pragma once
#include <ostream>

#include "comm/communicator.h"

namespace parallm::comm {
inline void PrintTo(const OpCounts& c, std::ostream* os) {
  *os << c.text();
}
}  // namespace parallm::comm
