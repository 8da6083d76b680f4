// Device operands staged through host memory (design in device_staging.h).
#include "comm/device_staging.h"

#include <map>
#include <mutex>
#include <vector>

#include "core/gpu.h"

namespace parallm::comm {

// The operands of one staged operation: each device tensor, its host block
// and whether the result goes back. Kept by the Op until it is done.
struct StagedOperands {
  struct Operand {
    Tensor device;
    void* block = nullptr;
    size_t bytes = 0;
    bool out = false;
  };
  explicit StagedOperands(StageProvider* p) : provider(p), copies(p->copies()) {}
  ~StagedOperands();
  StageProvider* provider;
  std::unique_ptr<StageCopies> copies;
  std::vector<Operand> operands;
  // 0: the inputs' copies; 1: the backend's operation (MPI may still read or write the blocks); 2: the outputs'
  // copies, all queued. The blocks go back to the cache only from 0 or 2 with every copy done.
  int phase = 0;
};

namespace {

class GpuCopies : public StageCopies {
 public:
  void after_compute() override { s_.after_compute(); }
  void to_host(void* dst, const void* src, size_t bytes) override { s_.d2h(dst, src, bytes); }
  void to_device(void* dst, const void* src, size_t bytes) override { s_.h2d(dst, src, bytes); }
  void mark() override { s_.mark(); }
  bool done() override { return s_.done(); }

 private:
  gpu::Staging s_;
};

// Pinned blocks by power-of-two size (at least 4 KiB), kept for the process:
// after the first step every operation finds its blocks here.
class GpuProvider : public StageProvider {
 public:
  std::unique_ptr<StageCopies> copies() override { return std::make_unique<GpuCopies>(); }
  void* take(size_t bytes) override {
    const size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void*>& free = free_[size];
      if (!free.empty()) {
        void* p = free.back();
        free.pop_back();
        return p;
      }
    }
    return gpu::pinned_alloc(size);
  }
  void give(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_[block_size(bytes)].push_back(p);
  }

 private:
  static size_t block_size(size_t bytes) {
    size_t s = 4096;
    while (s < bytes) s *= 2;
    return s;
  }
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
};

StageProvider* g_provider = nullptr;

StageProvider* provider() {
  static auto* gpu = new GpuProvider();  // outlives static destructors of operations still held
  return g_provider ? g_provider : gpu;
}

// Which of a's and b's data go to the host before, and back after, the operation.
struct Roles {
  bool a_in = false, a_out = false, b_in = false, b_out = false;
};
Roles roles(const Op& op, int rank) {
  const bool root = rank == op.root;
  switch (op.kind) {
    case OpKind::AllReduce:
      return {true, true, false, false};
    case OpKind::Reduce:
      return {true, root, false, false};
    case OpKind::Broadcast:
      return {root, !root, false, false};
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
      return {true, false, false, true};
    case OpKind::Gather:
      return {true, false, false, root};
    case OpKind::Scatter:
      return {root, false, false, true};
    case OpKind::AllToAllV:
      return {true, false, true, true};
    case OpKind::Send:
      return {true, false, false, false};
    case OpKind::Recv:
      return {false, true, false, false};
    default:
      return {};
  }
}

// The inputs' copies, then the backend's operation, then the outputs' copies back.
class StagedPending : public Pending {
 public:
  StagedPending(StagedOperands& s, std::function<std::unique_ptr<Pending>()> start) : s_(s), start_(std::move(start)) {}
  bool poll() override {
    if (s_.phase == 0) {
      if (!s_.copies->done()) return false;
      s_.phase = 1;
      inner_ = start_();
    }
    if (s_.phase == 1) {
      if (!inner_->poll()) return false;
      for (const auto& o : s_.operands)
        if (o.out) s_.copies->to_device(o.device.raw(), o.block, o.bytes);
      s_.copies->mark();
      s_.phase = 2;
    }
    return s_.copies->done();
  }

 private:
  StagedOperands& s_;
  std::function<std::unique_ptr<Pending>()> start_;
  std::unique_ptr<Pending> inner_;
};

}  // namespace

StagedOperands::~StagedOperands() {
  bool idle = false;
  try {
    idle = phase != 1 && copies->done();
  } catch (...) {  // a failed device: keep everything, as below
  }
  if (!idle) {  // a copy or the backend may still use these (the operation failed mid-way): leak, never reuse
    for (auto& o : operands) new Tensor(std::move(o.device));
    return;
  }
  for (const auto& o : operands)
    if (o.block) provider->give(o.block, o.bytes);
}

StageProvider* set_stage_provider(StageProvider* p) {
  StageProvider* before = g_provider;
  g_provider = p;
  return before;
}

bool on_device(const Op& op) {
  return (op.a.numel() > 0 && !op.a.device().is_cpu()) || (op.b.numel() > 0 && !op.b.device().is_cpu());
}

void stage(Op& op, int rank) {
  auto st = std::make_shared<StagedOperands>(provider());
  st->copies->after_compute();
  const Roles r = roles(op, rank);
  const auto one = [&](Tensor& t, bool in, bool out) {
    if (t.numel() == 0 || t.device().is_cpu()) return;
    StagedOperands::Operand& o = st->operands.emplace_back();
    o.device = t;
    o.bytes = t.nbytes();
    o.block = st->provider->take(o.bytes);
    o.out = out;
    if (in) st->copies->to_host(o.block, t.raw(), o.bytes);
    t = Tensor::view_of(o.block, t.shape(), t.dtype());  // the host stand-in the backend sees
  };
  one(op.a, r.a_in, r.a_out);
  one(op.b, r.b_in, r.b_out);
  st->copies->mark();
  op.staged = std::move(st);
}

std::unique_ptr<Pending> staged_start(Op& op, const std::function<std::unique_ptr<Pending>()>& start) {
  return std::make_unique<StagedPending>(*op.staged, start);
}

}  // namespace parallm::comm
