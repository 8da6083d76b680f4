// TensorBoard's record format (train/records/tb_writer.h) against vectors encoded by
// hand from the Event schema, with CRCs computed by python3-crcmod.
#include <gtest/gtest.h>

#include <string>

#include "train/records/tb_writer.h"

using namespace parallm::train;

namespace {
std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += std::string{d[c >> 4], d[c & 15]};
  return s;
}
}  // namespace

TEST(TensorBoard, Crc32cAndItsMaskMatchTheReference) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(masked_crc32c("", 0), 0xA282EAD8u);
  EXPECT_EQ(masked_crc32c(std::string(8, '\0').data(), 8), 0x07980329u);
}

TEST(TensorBoard, EventsAndRecordsAreTheSchemasBytes) {
  const std::string v = version_event(1700000000.0);
  EXPECT_EQ(hex(v), "0900000040fc54d9411a0d627261696e2e4576656e743a32");
  EXPECT_EQ(hex(tf_record(v)), "1800000000000000a37f4b22" + hex(v) + "eced8f9d");
  const std::string s = scalar_event(1700000000.5, 10, "loss", 2.5f);
  EXPECT_EQ(hex(s), "0900002040fc54d941100a2a0d0a0b0a046c6f73731500002040");
  EXPECT_EQ(hex(tf_record(s)), "1a00000000000000129bd82d" + hex(s) + "3f2e8cb4");
}
