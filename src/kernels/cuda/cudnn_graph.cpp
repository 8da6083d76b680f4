// cuDNN backend API helpers (see cudnn_graph.h).
#include "kernels/cuda/cudnn_graph.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/gpu.h"

namespace parallm::kernels::cuda::dnn {

namespace {
// "status: cuDNN's last message" (the message may be empty).
std::string describe(cudnnStatus_t st) {
  char msg[512] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  return msg[0] ? fmt::format("{}: {}", cudnnGetErrorString(st), msg) : std::string(cudnnGetErrorString(st));
}
}  // namespace

void check(cudnnStatus_t st, const char* where, const char* call) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  const std::string who = gpu::context().empty() ? "" : ", " + gpu::context();
  throw CudaError(where, fmt::format("{}: {} (device {}{})", call, describe(st), gpu::current_device(), who));
}

namespace {
constexpr const char* kWhere = "kernels.cuda.cudnn";
}

Desc::Desc(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), kWhere, "cudnnBackendCreateDescriptor");
}
Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}
Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}
Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* v) {
  const cudnnStatus_t st = cudnnBackendSetAttribute(d_, name, type, count, v);
  if (st != CUDNN_STATUS_SUCCESS)
    check(st, kWhere, fmt::format("cudnnBackendSetAttribute(attribute {})", static_cast<int>(name)).c_str());
  return *this;
}
Desc& Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& v) {
  cudnnBackendDescriptor_t d = v.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}
Desc& Desc::set_i64(cudnnBackendAttributeName_t name, int64_t v) {
  return set(name, CUDNN_TYPE_INT64, 1, &v);
}
Desc& Desc::finalize(const char* what) {
  const cudnnStatus_t st = cudnnBackendFinalize(d_);
  if (st != CUDNN_STATUS_SUCCESS) check(st, kWhere, fmt::format("cudnnBackendFinalize({})", what).c_str());
  return *this;
}

Dims packed(const Dims& dim) {
  Dims s{};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    s[i] = acc;
    acc *= dim[i];
  }
  return s;
}

cudnnHandle_t handle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t x = nullptr;
    check(cudnnCreate(&x), kWhere, "cudnnCreate");
    return x;
  }();
  return h;
}

const Desc& Graph::tensor(const TensorSpec& t) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 16;
  const bool virt = t.is_virtual, by_value = t.by_value;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dim.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.stride.data())
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, t.uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, align)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  d.finalize("tensor");
  keep_.push_back(std::move(d));
  return keep_.back();
}

void Graph::pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc* t, const Desc& y,
                      int64_t axis, cudnnDataType_t compute) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize("pointwise");
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize("pointwise operation");
  add_op(std::move(op), std::move(pw));
}

void Graph::reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
  Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .finalize("reduction");
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
      .finalize("reduction operation");
  add_op(std::move(op), std::move(r));
}

void Graph::matmul(const Desc& a, const Desc& b, const Desc& c) {
  Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute).finalize("matmul");
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .finalize("matmul operation");
  add_op(std::move(op), std::move(m));
}

void Graph::reshape(const Desc& x, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
      .finalize("reshape operation");
  add_op(std::move(op));
}

void Graph::add_op(Desc op, Desc inner) {
  ops_.push_back(op.get());
  keep_.push_back(std::move(op));
  if (inner.get()) keep_.push_back(std::move(inner));
}

Plan Graph::build() {
  cudnnHandle_t h = handle();
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
           ops_.data());
  if (cudnnStatus_t st = cudnnBackendFinalize(graph.get()); st != CUDNN_STATUS_SUCCESS) {
    why_ = "operation graph: " + describe(st);
    return {};
  }
  // Heuristics, then the instant mode's fallback list.
  std::vector<Desc> cfgs;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
    if (n <= 0) continue;
    std::vector<Desc> got;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < n; ++i) {
      got.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(got.back().get());
    }
    int64_t m = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &m,
                                 raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int64_t i = 0; i < m; ++i) cfgs.push_back(std::move(got[i]));
    if (!cfgs.empty()) break;  // the fallback list only when mode A has nothing
  }
  why_ = cfgs.empty() ? "the heuristics offer no engine" : "";
  for (auto& cfg : cfgs) {
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
        .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    if (cudnnStatus_t st = cudnnBackendFinalize(plan.get()); st != CUDNN_STATUS_SUCCESS) {
      why_ += (why_.empty() ? "plan: " : "; plan: ") + describe(st);
      continue;
    }
    int64_t ws = 0, count = 0;
    cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, &ws);
    return Plan(std::move(plan), ws);
  }
  return {};
}

Bindings& Bindings::add(int64_t uid, void* p) {
  PARALLM_CHECK(n_ < kMax, InternalError, "kernels.cuda.cudnn", "more than {} tensors bound", kMax);
  uids_[n_] = uid;
  ptrs_[n_++] = p;
  return *this;
}

void Plan::execute(const Bindings& bindings, void* workspace, const char* where) const {
  // The variant pack is cuDNN's per-call record of the pointers (as cudnn-frontend builds it per call).
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, bindings.size(), bindings.uids())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, bindings.size(), bindings.ptrs())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize("variant pack");
  cudnnHandle_t h = handle();
  check(cudnnSetStream(h, static_cast<cudaStream_t>(gpu::stream())), where, "cudnnSetStream");
  check(cudnnBackendExecute(h, plan_.get(), pack.get()), where, "cudnnBackendExecute");
}

}  // namespace parallm::kernels::cuda::dnn
