#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace parallm;

TEST(Allocator, TracksCurrentAndPeakPerCategory) {
  auto& a = HostAllocator::instance();
  auto before = a.stats();
  {
    Buffer b1(1000, MemCategory::Grads);
    Buffer b2(3000, MemCategory::Grads);
    auto mid = a.stats();
    EXPECT_EQ(mid.current[int(MemCategory::Grads)] - before.current[int(MemCategory::Grads)], 4000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b1.data()) % 64, 0u);
  }
  auto after = a.stats();
  EXPECT_EQ(after.current[int(MemCategory::Grads)], before.current[int(MemCategory::Grads)]);
  EXPECT_GE(after.peak[int(MemCategory::Grads)], before.current[int(MemCategory::Grads)] + 4000u);
}

TEST(Tensor, ViewsShareStorageAndCheckBounds) {
  Tensor t = Tensor::empty({4, 6}, DType::F32, MemCategory::Scratch);
  EXPECT_EQ(t.numel(), 24);
  Tensor v = t.slice_view(6, {2, 3});
  v.data<float>()[0] = 5.0f;
  EXPECT_EQ(t.data<float>()[6], 5.0f);
  EXPECT_THROW(t.slice_view(20, {2, 3}), ShapeError);
  EXPECT_THROW(t.reshape({5, 5}), ShapeError);
  EXPECT_THROW(t.data<int32_t>(), ShapeError);
}

TEST(DType, ParsesEverySpellingAndRejectsOthers) {
  EXPECT_EQ(parse_dtype("fp32"), DType::F32);
  EXPECT_EQ(parse_dtype("float32"), DType::F32);
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  try {
    parse_dtype("fp8");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos);
  }
}

TEST(DType, Bf16RoundTrip) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
  EXPECT_NEAR(bf16_to_f32(f32_to_bf16(3.14159f)), 3.14159f, 0.01f);
}
