// Device operands through host-only backends (comm/device_staging.h), without
// a GPU: a stand-in provider whose "device" memory is host memory labelled
// cuda:0 and whose copies run one per poll, as a GPU's finish later. Every
// kind of operation on such tensors, on 1 rank (self) and 3 (mpi through
// mpirun), against the values each rank can compute; which copies ran (an
// output nobody writes is never copied back); a pipeline's receive issued
// before its send; the host blocks all handed back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_staging.h"
#include "world_main.h"

using namespace parallm;
using namespace parallm::comm;

namespace {

Communicator* world = nullptr;

// Bytes copied per direction; host blocks out.
struct Ledger {
  std::atomic<int64_t> to_host{0}, to_device{0}, blocks{0};
};
Ledger ledger;

// Copies queued and run one per done() call until every copy queued before the last mark() has run; copies
// queued after it never run: a staging that forgot to mark after its copies back would lose them.
class LazyCopies : public StageCopies {
 public:
  void after_compute() override {}
  void to_host(void* dst, const void* src, size_t bytes) override {
    ledger.to_host += static_cast<int64_t>(bytes);
    queue(dst, src, bytes);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    ledger.to_device += static_cast<int64_t>(bytes);
    queue(dst, src, bytes);
  }
  void mark() override {
    std::lock_guard<std::mutex> lock(mu_);
    marker_ = queued_;
  }
  bool done() override {  // one copy runs per call that finds the marker not yet passed
    std::lock_guard<std::mutex> lock(mu_);
    if (ran_ >= marker_) return true;
    queue_.front()();
    queue_.pop_front();
    ++ran_;
    return false;
  }

 private:
  void queue(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([=] { std::memcpy(dst, src, bytes); });
    ++queued_;
  }
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;
  int64_t queued_ = 0, ran_ = 0, marker_ = 0;
};

class HostProvider : public StageProvider {
 public:
  std::unique_ptr<StageCopies> copies() override { return std::make_unique<LazyCopies>(); }
  void* take(size_t bytes) override {
    ++ledger.blocks;
    return std::malloc(bytes);
  }
  void give(void* p, size_t) override {
    --ledger.blocks;
    std::free(p);
  }
};

// "Device" tensors: host memory labelled cuda:0, kept for the test program.
Tensor dev(int64_t n, DType t = DType::F32) {
  static std::vector<std::unique_ptr<char[]>> keep;
  keep.emplace_back(new char[std::max<int64_t>(n, 1) * 4]());
  return Tensor::view_of(keep.back().get(), {n}, t, Device::cuda(0));
}
float* f(const Tensor& t) {
  return static_cast<float*>(t.raw());
}
float v(int rank, int64_t i) {
  return static_cast<float>((rank * 7 + i * 3) % 11 - 5);
}
Tensor input(int rank, int64_t n) {
  Tensor t = dev(n);
  for (int64_t i = 0; i < n; ++i) f(t)[i] = v(rank, i);
  return t;
}

// The copies of one operation, by direction.
struct Moved {
  int64_t to_host, to_device;
};
Moved moved(const std::function<void()>& op) {
  const int64_t h = ledger.to_host, d = ledger.to_device;
  op();
  return {ledger.to_host - h, ledger.to_device - d};
}

TEST(DeviceStaging, AllReduceAndReduceCopyWhatTheyUse) {
  const int n = world->size(), me = world->rank();
  for (int64_t c : {0, 1, 1001}) {
    Tensor x = input(me, c);
    const Moved m = moved([&] { world->all_reduce(x, ReduceOp::Sum); });
    for (int64_t i = 0; i < c; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += v(r, i);
      ASSERT_EQ(f(x)[i], want) << "all_reduce element " << i;
    }
    EXPECT_EQ(m.to_host, c * 4);
    EXPECT_EQ(m.to_device, c * 4);
  }
  const int root = 1 % n;
  Tensor y = input(me, 5);
  const Moved m = moved([&] { world->reduce(y, ReduceOp::Max, root); });
  for (int64_t i = 0; i < 5; ++i) {
    float want = v(me, i);
    if (me == root)
      for (int r = 0; r < n; ++r) want = std::max(want, v(r, i));
    ASSERT_EQ(f(y)[i], want) << "reduce element " << i;
  }
  EXPECT_EQ(m.to_device, me == root ? 20 : 0) << "a reduce's result goes back on its root only";
}

TEST(DeviceStaging, BroadcastGatherScatterAndReduceScatter) {
  const int n = world->size(), me = world->rank(), root = n - 1;
  Tensor b = me == root ? input(root, 9) : dev(9);
  const Moved mb = moved([&] { world->broadcast(b, root); });
  for (int64_t i = 0; i < 9; ++i) ASSERT_EQ(f(b)[i], v(root, i));
  EXPECT_EQ(mb.to_host, me == root ? 36 : 0);
  EXPECT_EQ(mb.to_device, me == root ? 0 : 36);

  const int64_t total = 3 * n + 1;  // uneven shards
  const Shard mine = shard_of(total, n, me);
  Tensor part = dev(mine.count), all = dev(total);
  for (int64_t i = 0; i < mine.count; ++i) f(part)[i] = v(0, mine.offset + i);
  world->all_gather(part, all);
  for (int64_t i = 0; i < total; ++i) ASSERT_EQ(f(all)[i], v(0, i)) << "all_gather " << i;

  Tensor gathered = me == 0 ? dev(total) : Tensor();
  world->gather(part, gathered, 0, total);
  for (int64_t i = 0; me == 0 && i < total; ++i) ASSERT_EQ(f(gathered)[i], v(0, i)) << "gather " << i;

  Tensor whole = me == 0 ? input(4, total) : Tensor(), got = dev(mine.count);
  const Moved ms = moved([&] { world->scatter(whole, got, 0, total); });
  for (int64_t i = 0; i < mine.count; ++i) ASSERT_EQ(f(got)[i], v(4, mine.offset + i)) << "scatter " << i;
  EXPECT_EQ(ms.to_host, me == 0 ? total * 4 : 0) << "a scatter's input is copied on its root only";
  EXPECT_EQ(ms.to_device, mine.count * 4);

  // In place: this rank's part is a view of the output, as ZeRO gathers.
  Tensor both = dev(total);
  for (int64_t i = 0; i < mine.count; ++i) f(both)[mine.offset + i] = v(2, mine.offset + i);
  world->all_gather(both.slice_view(mine.offset, {mine.count}), both);
  for (int64_t i = 0; i < total; ++i) ASSERT_EQ(f(both)[i], v(2, i)) << "in-place all_gather " << i;

  Tensor blocks = dev(2 * n), swapped = dev(2 * n);  // two elements to each rank
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < 2; ++k) f(blocks)[2 * s + k] = static_cast<float>(me * 10 + s + k * 100);
  world->all_to_all(blocks, swapped);
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < 2; ++k) ASSERT_EQ(f(swapped)[2 * s + k], static_cast<float>(s * 10 + me + k * 100));

  Tensor in = input(me, total), out = dev(mine.count);
  world->reduce_scatter(in, out, ReduceOp::Sum);
  for (int64_t i = 0; i < mine.count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += v(r, mine.offset + i);
    ASSERT_EQ(f(out)[i], want) << "reduce_scatter " << i;
  }
}

TEST(DeviceStaging, AllToAllVKeepsWhatItDoesNotReceive) {
  const int n = world->size(), me = world->rank();
  // Rank r sends (r + s) % 3 elements to rank s, each r * 100 + s * 10 + k; the output has 4 spare elements.
  std::vector<int64_t> send(n), recv(n);
  int64_t ns = 0, nr = 0;
  for (int s = 0; s < n; ++s) {
    send[s] = (me + s) % 3;
    recv[s] = (s + me) % 3;
    ns += send[s];
    nr += recv[s];
  }
  Tensor in = dev(ns), out = dev(nr + 4);
  int64_t at = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t k = 0; k < send[s]; ++k) f(in)[at++] = static_cast<float>(me * 100 + s * 10 + k);
  for (int64_t i = 0; i < nr + 4; ++i) f(out)[i] = -1.0f;
  world->all_to_all_v_async(in, send, out, recv)->wait();
  at = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t k = 0; k < recv[s]; ++k) ASSERT_EQ(f(out)[at++], static_cast<float>(s * 100 + me * 10 + k));
  for (int64_t i = nr; i < nr + 4; ++i) ASSERT_EQ(f(out)[i], -1.0f) << "an element nobody sent changed";
}

TEST(DeviceStaging, ReceivesIssuedBeforeSendsDoNotWait) {
  const int n = world->size(), me = world->rank();
  if (n == 1) GTEST_SKIP() << "needs a peer";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  // A pipeline's order: every rank posts its receive first, then sends.
  Tensor in = dev(1 << 16), out = input(me, 1 << 16);
  auto r = world->recv_async(in, prev, 4);
  auto s = world->send_async(out, next, 4);
  r->wait();
  s->wait();
  for (int64_t i = 0; i < (1 << 16); i += 97) ASSERT_EQ(f(in)[i], v(prev, i));
}

TEST(DeviceStaging, HostAndDeviceOperandsMixAndBlocksComeBack) {
  const int n = world->size(), me = world->rank();
  const Shard mine = shard_of(2 * n, n, me);
  Tensor part = Tensor::empty({mine.count}, DType::F32), all = dev(2 * n);  // host in, device out
  for (int64_t i = 0; i < mine.count; ++i) part.data<float>()[i] = v(1, mine.offset + i);
  const Moved m = moved([&] { world->all_gather(part, all); });
  for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(f(all)[i], v(1, i));
  EXPECT_EQ(m.to_host, 0) << "a host operand is not copied";
  EXPECT_EQ(m.to_device, 2 * n * 4);
  Tensor bf = dev(3, DType::BF16);
  for (int i = 0; i < 3; ++i) static_cast<uint16_t*>(bf.raw())[i] = f32_to_bf16(1.5f);
  world->all_reduce(bf, ReduceOp::Sum);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(bf16_to_f32(static_cast<uint16_t*>(bf.raw())[i]), 1.5f * n);
  world->barrier();
  // An operation's blocks go back as its record is dropped, just after its wait() returns.
  for (int k = 0; k < 200 && ledger.blocks != 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ledger.blocks, 0) << "host blocks not handed back";
}

}  // namespace

int main(int argc, char** argv) {
  static HostProvider provider;
  set_stage_provider(&provider);
  test_util::WorldMain o;
  o.timeout_s = 30;
  return test_util::world_test_main(argc, argv, world, o);
}
