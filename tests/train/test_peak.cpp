// The CPU's MFU peak (train/records/peak.h): the best of the first runs'
// measurements, so one taken while other work ran does not stay (issue 48: the
// quickstart printed mfu 101.26% against a peak measured under load).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/records/peak.h"

using namespace parallm;
namespace fs = std::filesystem;

TEST(Peak, TheBestOfTheFirstRunsMeasurementsIsKept) {
  const fs::path dir = fs::temp_directory_path() / ("parallm_peak_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path cache = dir / "gemm_peak.json";
  int calls = 0;
  auto measuring = [&](double v) {
    return [&calls, v] {
      ++calls;
      return v;
    };
  };
  // A first run under load measures low; the next runs measure again and keep the best.
  auto p = train::cached_best_peak(cache, "cpu | threads=2", measuring(40e9));
  EXPECT_EQ(p.flops, 40e9);
  EXPECT_EQ(p.measurements, 1);
  p = train::cached_best_peak(cache, "cpu | threads=2", measuring(100e9));
  EXPECT_EQ(p.flops, 100e9);
  EXPECT_EQ(p.measurements, 2);
  p = train::cached_best_peak(cache, "cpu | threads=2", measuring(90e9));
  EXPECT_EQ(p.flops, 100e9);
  EXPECT_EQ(p.measurements, train::kPeakMeasurements);
  // From then on the cache answers without measuring.
  p = train::cached_best_peak(cache, "cpu | threads=2", measuring(500e9));
  EXPECT_EQ(p.flops, 100e9);
  EXPECT_EQ(calls, 3);
  // Another key is its own entry; an entry of the older format (one number) counts as one measurement.
  std::ofstream(cache) << R"({"old | threads=1": 7e9, "x": {"flops": "bad"}})";
  p = train::cached_best_peak(cache, "old | threads=1", measuring(5e9));
  EXPECT_EQ(p.flops, 7e9);
  EXPECT_EQ(p.measurements, 2);
  p = train::cached_best_peak(cache, "x", measuring(3e9));  // a damaged entry: measured anew
  EXPECT_EQ(p.flops, 3e9);
  EXPECT_EQ(p.measurements, 1);
  std::ofstream(cache) << "not json";  // a damaged file: measured anew, rewritten
  p = train::cached_best_peak(cache, "cpu | threads=2", measuring(60e9));
  EXPECT_EQ(p.flops, 60e9);
  EXPECT_EQ(p.measurements, 1);
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(cache)).contains("cpu | threads=2"));
  fs::remove_all(dir);
}
