// The nccl backend on device memory: every collective against a serial
// reference with counts that do not divide by the group, bf16 and fp32,
// ordering after work queued on the compute stream, and the errors NCCL's
// limits call for (device uint16 reductions, a message to the rank itself;
// point to point is in test_p2p). One process per GPU: run alone (one rank, no MPI) or
// under mpirun with as many ranks as GPUs. Exits 77 (a ctest skip) without a
// GPU or without NCCL. Host tensors through NCCL are covered by
// test_collectives run with the nccl backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "core/gpu.h"
#include "world_main.h"

using namespace parallm;
using namespace parallm::comm;

namespace {

Communicator* world = nullptr;

float value(int rank, int64_t i) {
  return static_cast<float>((rank * 7 + i * 3) % 11 - 5);
}

// A device tensor holding `host` (uploaded before the collective is issued).
struct DeviceTensor {
  gpu::DeviceBuffer buf;
  Tensor t;
  DeviceTensor(const std::vector<float>& host, DType dt)
      : buf(std::max<size_t>(1, host.size()) * 4, MemCategory::Other) {
    const auto n = static_cast<int64_t>(host.size());
    if (dt == DType::BF16) {
      std::vector<uint16_t> h;
      for (float v : host) h.push_back(f32_to_bf16(v));
      gpu::memcpy_h2d(buf.data(), h.data(), h.size() * 2);
    } else {
      gpu::memcpy_h2d(buf.data(), host.data(), host.size() * 4);
    }
    t = Tensor::view_of(buf.data(), {n}, dt, Device::cuda(gpu::current_device()));
  }
  std::vector<float> read() const {
    const auto n = static_cast<size_t>(t.numel());
    std::vector<float> out(n);
    if (t.dtype() == DType::BF16) {
      std::vector<uint16_t> h(n);
      gpu::memcpy_d2h(h.data(), buf.data(), n * 2);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
    } else {
      gpu::memcpy_d2h(out.data(), buf.data(), n * 4);
    }
    return out;
  }
};

std::vector<float> inputs(int rank, int64_t n, int64_t offset = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, offset + i);
  return v;
}

float sum_over_ranks(int64_t i) {
  float s = 0;
  for (int r = 0; r < world->size(); ++r) s += value(r, i);
  return s;
}

}  // namespace

TEST(Nccl, AllReduceSumAndAvgOnDevice) {
  const int n = world->size();
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t c : {int64_t{1}, int64_t{7}, 3 * int64_t{n} + 1, int64_t{100003}}) {
      DeviceTensor x(inputs(world->rank(), c), dt);
      world->all_reduce(x.t, ReduceOp::Sum);
      auto got = x.read();
      for (int64_t i = 0; i < c; ++i) ASSERT_EQ(got[i], sum_over_ranks(i)) << dtype_name(dt) << " count " << c;
      DeviceTensor y(inputs(world->rank(), c), dt);
      world->all_reduce(y.t, ReduceOp::Avg);
      got = y.read();
      for (int64_t i = 0; i < c; ++i) ASSERT_NEAR(got[i], sum_over_ranks(i) / n, 0.05) << "avg count " << c;
    }
}

TEST(Nccl, GatherLikeWithUnevenShardsOnDevice) {
  const int n = world->size(), me = world->rank();
  for (int64_t c : {int64_t{0}, int64_t{1}, 3 * int64_t{n} + 1, 4 * int64_t{n}}) {
    const Shard mine = shard_of(c, n, me);
    auto owner = [&](int64_t i) {
      for (int r = 0; r < n; ++r) {
        const Shard s = shard_of(c, n, r);
        if (i >= s.offset && i < s.offset + s.count) return value(r, i);
      }
      return -999.0f;
    };
    DeviceTensor in(inputs(me, mine.count, mine.offset), DType::F32), out(std::vector<float>(c, 0.f), DType::F32);
    world->all_gather(in.t, out.t);
    auto got = out.read();
    for (int64_t i = 0; i < c; ++i) ASSERT_EQ(got[i], owner(i)) << "all_gather count " << c;

    DeviceTensor whole(inputs(me, c), DType::F32), part(std::vector<float>(mine.count, 0.f), DType::F32);
    world->reduce_scatter(whole.t, part.t, ReduceOp::Sum);
    got = part.read();
    for (int64_t i = 0; i < mine.count; ++i)
      ASSERT_EQ(got[i], sum_over_ranks(mine.offset + i)) << "reduce_scatter count " << c;

    const int root = n - 1;
    DeviceTensor b(inputs(me, c), DType::F32);
    world->broadcast(b.t, root);
    got = b.read();
    for (int64_t i = 0; i < c; ++i) ASSERT_EQ(got[i], value(root, i)) << "broadcast count " << c;
  }
}

TEST(Nccl, HostAndDeviceTensorsMix) {
  // A host input gathered into device memory: the host part is staged.
  const int n = world->size(), me = world->rank();
  const int64_t c = 5 * int64_t{n} + 2;
  const Shard mine = shard_of(c, n, me);
  Tensor in = Tensor::empty({mine.count}, DType::F32);
  for (int64_t i = 0; i < mine.count; ++i) in.data<float>()[i] = value(me, mine.offset + i);
  DeviceTensor out(std::vector<float>(c, 0.f), DType::F32);
  world->all_gather(in, out.t);
  auto got = out.read();
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(c, n, r);
    for (int64_t i = s.offset; i < s.offset + s.count; ++i) ASSERT_EQ(got[i], value(r, i));
  }
}

TEST(Nccl, AsyncWorkAndBarrier) {
  std::vector<std::unique_ptr<DeviceTensor>> xs;
  std::vector<WorkPtr> ws;
  for (int k = 0; k < 6; ++k) {
    xs.push_back(std::make_unique<DeviceTensor>(inputs(world->rank(), 1000 + k), DType::F32));
    ws.push_back(world->all_reduce_async(xs.back()->t, ReduceOp::Sum));
  }
  for (auto& w : ws) w->wait();
  for (int k = 0; k < 6; ++k) {
    auto got = xs[k]->read();
    for (int64_t i = 0; i < 1000 + k; i += 97) ASSERT_EQ(got[i], sum_over_ranks(i));
  }
  world->barrier();
  EXPECT_EQ(world->gpu_device(), gpu::current_device());
}

TEST(Nccl, LimitsAreErrorsWithContext) {
  // uint16 has no NCCL arithmetic: a device reduction of it is refused by name.
  gpu::DeviceBuffer b(64, MemCategory::Other);
  gpu::memset_zero(b.data(), 64);
  Tensor u = Tensor::view_of(b.data(), {4}, DType::U16, Device::cuda(gpu::current_device()));
  auto sub = world->split(0, world->rank(), "limits");  // a throwaway group: an error breaks it
  try {
    sub->all_reduce(u, ReduceOp::Sum);
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("uint16"), std::string::npos) << e.what();
  }
  Tensor f = Tensor::view_of(b.data(), {4}, DType::F32, Device::cuda(gpu::current_device()));
  // A message to the rank itself is refused as it is issued (NCCL moves messages between ranks).
  try {
    world->send(f, world->rank());
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("to this rank itself"), std::string::npos) << e.what();
  }
  world->all_reduce(f, ReduceOp::Sum);  // the world still works
}

int main(int argc, char** argv) {
  test_util::WorldMain o;
  o.backend = "nccl";
  o.one_report = false;
  return test_util::world_test_main(argc, argv, world, o);
}
