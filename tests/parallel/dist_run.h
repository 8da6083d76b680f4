// Shared by the multi-rank training tests (each binary runs under mpirun):
// the world communicator, a fixture that gives the job one scratch directory
// with the tiny dataset, and the main() that starts the world.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/world_main.h"
#include "train/loop/trainer.h"
#include "train/tiny_run.h"

namespace parallm::test_util {

inline comm::Communicator* world = nullptr;

class DistRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory for the job: rank 0's pid names it.
    Tensor id = Tensor::empty({1}, DType::I32);
    id.data<int32_t>()[0] = static_cast<int32_t>(::getpid());
    world->broadcast(id, 0);
    root_ = std::filesystem::temp_directory_path() / ("parallm_dist_" + std::to_string(id.data<int32_t>()[0]));
    if (world->rank() == 0) {
      std::filesystem::remove_all(root_);
      std::filesystem::create_directories(root_);
      prepare_tiny_dataset(root_);
    }
    world->barrier();
  }
  void TearDown() override {
    world->barrier();
    if (world->rank() == 0) std::filesystem::remove_all(root_);
  }

  train::RunConfig tiny(const std::string& out, int64_t batch) {
    train::RunConfig c;
    c.apply_overrides(tiny_run_overrides(root_, out));
    c.apply_overrides({"model.batch_size=" + std::to_string(batch), "ddp.bucket_mb=0.01"});
    return c;
  }

  // Two runs' train losses within `tol` (relative, every step) and their last val loss too; rank 0 prints the largest.
  static void expect_close(const train::RunSummary& got, const train::RunSummary& want, double tol,
                           const std::string& what) {
    ASSERT_EQ(got.train_losses.size(), want.train_losses.size()) << what;
    const double d = max_rel_diff(got.train_losses, want.train_losses);
    if (world->rank() == 0)
      std::printf("%s: max relative train-loss difference %.3g over %zu steps\n", what.c_str(), d,
                  got.train_losses.size());
    EXPECT_LT(d, tol) << what;
    EXPECT_NEAR(got.last_val_loss, want.last_val_loss, tol * want.last_val_loss) << what;
  }
  // |a_i - b_i| / |b_i| per step, and its largest.
  static std::vector<double> rel_diffs(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> d;
    for (size_t i = 0; i < a.size(); ++i) d.push_back(std::fabs(double(a[i]) - b[i]) / std::fabs(double(b[i])));
    return d;
  }
  static double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    const std::vector<double> d = rel_diffs(a, b);
    return d.empty() ? 0.0 : *std::max_element(d.begin(), d.end());
  }
  std::filesystem::path root_;
};

// argv[1]: the backend ("mpi" under mpirun, "self" alone; default auto).
inline int dist_test_main(int argc, char** argv) {
  WorldMain o;
  o.barrier_at_end = false;
  return world_test_main(argc, argv, world, o);
}

}  // namespace parallm::test_util
