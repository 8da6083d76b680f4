// Device tensors through host-only backends (mpi, self): several ranks on one
// GPU, each its own process, exchange their device buffers through MPI.
//
// Design: QueuedComm stages an operation whose operands live on a device
// before it queues it. On the caller's thread, each device operand gets a host
// stand-in of the same shape in page-locked memory (from a cache, so a
// training step allocates nothing), and the inputs' copies to it are queued on
// a stream beside the compute stream, after the GPU work queued so far (the
// caller's gradients, activations). The backend then only ever sees host
// tensors. The operation's Pending runs in three phases, each polled without
// blocking, so comm.timeout_s and the hang diagnosis hold as for host
// operations: the inputs' copies finish, the backend runs, the outputs' copies
// back to the device finish. wait() returns after the last: anything queued
// afterwards on any stream sees the result (the nccl backend's contract).
// Nothing is copied back at submit (a pipeline's receive issued before its
// send would deadlock) nor at wait() (a caller may never wait on a send).
//
// Which operands are copied, by kind (root and rank are the group's):
//   all_reduce a in and out; reduce a in, out on the root; broadcast a in on
//   the root, out elsewhere; all_gather, reduce_scatter, all_to_all, scatter
//   (a in on the root) and gather (b out on the root) a in, b out;
//   all_to_all_v a in, b in and out (the receives fill only part of it);
//   send a in; recv a out.
// An operand on the host stays as it is; views that alias on the device (an
// in-place all_gather) become separate host buffers, which every backend takes.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "comm/queued_comm.h"

namespace parallm::comm {

// The copies of one staged operation (core/gpu.h's Staging on a GPU).
class StageCopies {
 public:
  virtual ~StageCopies() = default;
  virtual void after_compute() = 0;  // later copies wait for the compute stream's work queued so far
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void mark() = 0;  // a marker after the copies queued so far
  virtual bool done() = 0;  // the marker has passed (never blocks)
};

// Where staging gets its copies and host memory. The default serves GPUs (a
// cache of pinned blocks); tests install one that copies between host views
// labelled as device memory, to run the whole path without a GPU.
class StageProvider {
 public:
  virtual ~StageProvider() = default;
  virtual std::unique_ptr<StageCopies> copies() = 0;
  virtual void* take(size_t bytes) = 0;  // host memory for the stand-ins, at least `bytes`
  virtual void give(void* p, size_t bytes) = 0;
};
// nullptr restores the default; returns the one before. Not thread-safe: set it before operations are issued.
StageProvider* set_stage_provider(StageProvider* p);

// Whether an operand of `op` lives on a device.
bool on_device(const Op& op);
// On the caller's thread: host stand-ins for op's device operands (op.a, op.b
// replaced), the inputs' copies queued; `rank` is this rank in the group.
void stage(Op& op, int rank);
// The Pending of a staged operation: the inputs' copies, then `start()` (the
// backend's), then the outputs' copies back.
std::unique_ptr<Pending> staged_start(Op& op, const std::function<std::unique_ptr<Pending>()>& start);

}  // namespace parallm::comm
