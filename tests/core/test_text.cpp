// Shared text parsers: strict, with errors that name what was read.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/text.h"

using namespace parallm;

TEST(Text, IntListTakesWholeIntegersOnly) {
  EXPECT_EQ(parse_int_list("3,7,12", "t", "X"), (std::vector<int64_t>{3, 7, 12}));
  EXPECT_EQ(parse_int_list("-1", "t", "X"), (std::vector<int64_t>{-1}));
  for (const char* bad : {"", "3,,7", "3,", "a", "1.5", "2 ", "99999999999999999999"}) {
    try {
      parse_int_list(bad, "t", "PARALLM_X");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PARALLM_X: \""), std::string::npos) << e.what();
    }
  }
}

TEST(Text, NumbersAreWholeAndDecimal) {
  EXPECT_EQ(to_int("-12"), -12);
  for (const char* bad : {"", "1.0", "0x10", " 3", "3 ", "99999999999999999999"}) EXPECT_FALSE(to_int(bad)) << bad;
  EXPECT_EQ(to_decimal("1e-3"), 1e-3);
  EXPECT_EQ(to_decimal("+.5"), 0.5);
  EXPECT_EQ(to_decimal("1."), 1.0);
  for (const char* bad : {"", "inf", "nan", "0x1p3", "1e999", "1,5", " 1"}) EXPECT_FALSE(to_decimal(bad)) << bad;
}

TEST(Text, UtcTimestampIsIso8601ToTheSecond) {
  const std::string t = parallm::utc_timestamp();
  ASSERT_EQ(t.size(), 20u) << t;
  EXPECT_EQ(t[4], '-');
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t[13], ':');
  EXPECT_EQ(t.back(), 'Z');
  EXPECT_GE(t.substr(0, 4), "2024");
}
