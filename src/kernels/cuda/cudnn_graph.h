// A thin layer over cuDNN's backend (graph) API, for the few fused operations
// parallm takes from cuDNN (attention): descriptors owned by move-only
// handles, tensors and operations added to a Graph by uid, the graph turned
// into the first execution plan cuDNN's heuristics offer that finalizes, and
// a plan run from (uid, pointer) pairs on parallm's stream. cuDNN failures
// become CudaError naming the call and cuDNN's own last message. Internal to
// kernels/cuda; compiled only when CMake found cuDNN (PARALLM_CUDNN).
#pragma once
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace parallm::kernels::cuda::dnn {

// cudnnStatus_t -> CudaError "[where] call: status: cuDNN's message (device d)".
void check(cudnnStatus_t st, const char* where, const char* call);

class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* v);
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& v);
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v);
  Desc& finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

struct TensorSpec {
  int64_t uid;
  cudnnDataType_t type;
  Dims dim, stride;
  bool is_virtual = false;
  bool by_value = false;
};

// Row-major strides of dims.
Dims packed(const Dims& dim);

// The (uid, pointer) pairs of one execution, in fixed storage: no heap
// allocation per call.
class Bindings {
 public:
  static constexpr int kMax = 16;
  Bindings& add(int64_t uid, void* p);
  int size() const { return n_; }
  const int64_t* uids() const { return uids_; }
  void* const* ptrs() const { return ptrs_; }

 private:
  int64_t uids_[kMax] = {};
  void* ptrs_[kMax] = {};
  int n_ = 0;
};

class Plan {
 public:
  Plan() = default;
  Plan(Desc plan, int64_t workspace_bytes) : plan_(std::move(plan)), workspace_(workspace_bytes) {}
  bool ok() const { return plan_.get() != nullptr; }
  int64_t workspace_bytes() const { return workspace_; }
  // Runs on parallm's stream with the given device (or, for by-value
  // tensors, host) pointers per uid and a workspace of workspace_bytes().
  void execute(const Bindings& bindings, void* workspace, const char* where) const;

 private:
  Desc plan_;
  int64_t workspace_ = 0;
};

class Graph {
 public:
  const Desc& tensor(const TensorSpec& t);
  const Desc& virtual_tensor(int64_t uid, cudnnDataType_t type, const Dims& dim) {
    return tensor({uid, type, dim, packed(dim), true, false});
  }
  // y = mode(x[, b[, t]]); GEN_INDEX takes the axis.
  void pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc* t, const Desc& y,
                 int64_t axis = -1, cudnnDataType_t compute = CUDNN_DATA_FLOAT);
  void reduction(cudnnReduceTensorOp_t op, const Desc& x, const Desc& y);
  void matmul(const Desc& a, const Desc& b, const Desc& c);
  // y: x under other dims, strides and/or type (a transposed view).
  void reshape(const Desc& x, const Desc& y);
  // The operation graph, the heuristics' configurations in order (mode A,
  // else the fallback list), the first that finalizes. An empty Plan (ok()
  // false) with why() when none does.
  Plan build();
  const std::string& why() const { return why_; }

 private:
  // Keeps an operation (and the descriptor it refers to) and lists it in the graph.
  void add_op(Desc op, Desc inner = {});
  std::deque<Desc> keep_;  // tensors and op-level descriptors (references stay valid)
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::string why_;
};

// The process's cuDNN handle (created on first use).
cudnnHandle_t handle();

}  // namespace parallm::kernels::cuda::dnn
