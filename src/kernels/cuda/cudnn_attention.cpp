// Causal attention through cuDNN's fused flash attention. cuDNN 9.19 has no
// single causal attention operation, so the graphs below spell attention out
// in cuDNN's primitive operations (matmuls, pointwise ops, reductions); its
// fused-attention engines recognize that pattern and run one kernel for it
// (Hopper: wgmma with the softmax overlapping the products). The pattern is
// the one cudnn-frontend emits for its SDPA node on cuDNN < 9.21:
//   forward:  S = Q K^T * scale, causal mask (row >= col, else -inf),
//             Stats = max + log(sum exp(S - max)), P = exp(S - max) / sum, O = P V
//   backward: D = rowsum(dO * O); P = exp(S*scale - Stats) masked;
//             dV = P^T dO; dS = scale * P * (dO V^T - D); dK = dS^T Q; dQ = dS K
// Q, K, V are strided views of the packed qkv [B, T, 3, NH, HS] (and dQ, dK,
// dV of dqkv), O and dO [B, T, NH, HS]; Stats is parallm's lse [B, NH, T].
// The backward comes in two shapes: with an fp32 dQ accumulator, which
// cuDNN's kernel adds into from many blocks in no fixed order (fast, not
// bitwise repeatable), or with dQ written by the graph's last product from dS
// spilled to the workspace (repeatable; the default, AttentionImpl::CudnnFast
// picks the other). A plan is built once per shape and kept with its workspace;
// a shape cuDNN has no engine for is remembered, logged once, and left to
// parallm's own kernels.
#include "kernels/cuda/cudnn_attention.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "core/allocator.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "kernels/attention.h"
#include "kernels/cuda/cudnn_graph.h"

namespace parallm::kernels::cuda {

namespace {
using dnn::Dims;
using dnn::Graph;

enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,
  kSoftmaxSum,
  kDQAccum,
  kVirtual = 100  // virtual tensors count up from here
};

struct Shape {
  int64_t B, T, NH, HS;
};

// Builds one graph; counts virtual tensor uids.
class Builder {
 public:
  explicit Builder(const Shape& s) : s_(s) {}
  Graph g;
  const Shape& s_;
  int64_t next_ = kVirtual;

  Dims qkv_strides() const {
    const int64_t H3 = 3 * s_.NH * s_.HS;
    return {s_.T * H3, s_.HS, H3, 1};
  }
  Dims o_strides() const {
    const int64_t C = s_.NH * s_.HS;
    return {s_.T * C, s_.HS, C, 1};
  }
  Dims bhtd() const { return {s_.B, s_.NH, s_.T, s_.HS}; }
  Dims bhdt() const { return {s_.B, s_.NH, s_.HS, s_.T}; }
  Dims bhtt() const { return {s_.B, s_.NH, s_.T, s_.T}; }
  Dims bht1() const { return {s_.B, s_.NH, s_.T, 1}; }
  Dims transposed(Dims st) const { return {st[0], st[1], st[3], st[2]}; }

  const dnn::Desc& io(int64_t uid, const Dims& dim, const Dims& stride) {
    return g.tensor({uid, CUDNN_DATA_BFLOAT16, dim, stride});
  }
  const dnn::Desc& f32(int64_t uid, const Dims& dim) {
    return g.tensor({uid, CUDNN_DATA_FLOAT, dim, dnn::packed(dim)});
  }
  const dnn::Desc& scalar(int64_t uid) {
    return g.tensor({uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true});
  }
  const dnn::Desc& tmp(cudnnDataType_t type, const Dims& dim) { return g.virtual_tensor(next_++, type, dim); }
  const dnn::Desc& tmp(cudnnDataType_t type, const Dims& dim, const Dims& stride) {
    return g.tensor({next_++, type, dim, stride, true, false});
  }

  const dnn::Desc& unary(cudnnPointwiseMode_t m, const dnn::Desc& x, const dnn::Desc& y) {
    g.pointwise(m, x, nullptr, nullptr, y);
    return y;
  }
  const dnn::Desc& binary(cudnnPointwiseMode_t m, const dnn::Desc& x, const dnn::Desc& b, const dnn::Desc& y,
                          cudnnDataType_t prec = CUDNN_DATA_FLOAT) {
    g.pointwise(m, x, &b, nullptr, y, -1, prec);
    return y;
  }
  // Entries above the diagonal (col > row) become -inf. The indices are
  // int32 computed in fp32 and compared as booleans, as cudnn-frontend has
  // them (the form measured on cuDNN 9.19).
  const dnn::Desc& causal(const dnn::Desc& x, const dnn::Desc& neg_inf) {
    const auto& row = tmp(CUDNN_DATA_INT32, bhtt());
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, 2);
    const auto& col = tmp(CUDNN_DATA_INT32, bhtt());
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, 3);
    const auto& keep = binary(CUDNN_POINTWISE_CMP_GE, row, col, tmp(CUDNN_DATA_BOOLEAN, bhtt()), CUDNN_DATA_BOOLEAN);
    const auto& y = tmp(CUDNN_DATA_FLOAT, bhtt());
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, &keep, y);
    return y;
  }
};

dnn::Plan build_forward(const Shape& s, std::string& why) {
  Builder b(s);
  const auto& q = b.io(kQ, b.bhtd(), b.qkv_strides());
  const auto& kt = b.io(kK, b.bhdt(), b.transposed(b.qkv_strides()));
  const auto& val = b.io(kV, b.bhtd(), b.qkv_strides());
  const auto& o = b.io(kO, b.bhtd(), b.o_strides());
  const auto& stats = b.f32(kStats, b.bht1());
  const auto& scale = b.scalar(kScale);
  const auto& neg_inf = b.scalar(kNegInf);
  const auto& S = b.tmp(CUDNN_DATA_FLOAT, b.bhtt());
  b.g.matmul(q, kt, S);
  const auto& S1 = b.binary(CUDNN_POINTWISE_MUL, S, scale, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& S2 = b.causal(S1, neg_inf);
  const auto& mx = b.tmp(CUDNN_DATA_FLOAT, b.bht1());
  b.g.reduction(CUDNN_REDUCE_TENSOR_MAX, S2, mx);
  const auto& S3 = b.binary(CUDNN_POINTWISE_SUB, S2, mx, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& E = b.unary(CUDNN_POINTWISE_EXP, S3, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& Z = b.tmp(CUDNN_DATA_FLOAT, b.bht1());
  b.g.reduction(CUDNN_REDUCE_TENSOR_ADD, E, Z);
  const auto& logZ = b.unary(CUDNN_POINTWISE_LOG, Z, b.tmp(CUDNN_DATA_FLOAT, b.bht1()));
  b.binary(CUDNN_POINTWISE_ADD, mx, logZ, stats);
  const auto& P = b.binary(CUDNN_POINTWISE_DIV, E, Z, b.tmp(CUDNN_DATA_BFLOAT16, b.bhtt()));
  b.g.matmul(P, val, o);
  dnn::Plan plan = b.g.build();
  why = b.g.why();
  return plan;
}

dnn::Plan build_backward(const Shape& s, bool repeatable, std::string& why) {
  Builder b(s);
  const auto qs = b.qkv_strides();
  const auto& q = b.io(kQ, b.bhtd(), qs);
  const auto& kt = b.io(kK, b.bhdt(), b.transposed(qs));
  const auto& vt = b.io(kV, b.bhdt(), b.transposed(qs));
  const auto& o = b.io(kO, b.bhtd(), b.o_strides());
  const auto& dO = b.io(kDO, b.bhtd(), b.o_strides());
  const auto& stats = b.f32(kStats, b.bht1());
  const auto& dQ = b.io(kDQ, b.bhtd(), qs);
  const auto& dK = b.io(kDK, b.bhtd(), qs);
  const auto& dV = b.io(kDV, b.bhtd(), qs);
  const auto& scale = b.scalar(kScale);
  const auto& one = b.scalar(kOne);
  const auto& neg_inf = b.scalar(kNegInf);
  const auto& softmax_sum = b.f32(kSoftmaxSum, b.bht1());
  // D = rowsum(dO * O)
  const auto& dOO = b.binary(CUDNN_POINTWISE_MUL, dO, o, b.tmp(CUDNN_DATA_FLOAT, b.bhtd()));
  const auto& rowsum = b.tmp(CUDNN_DATA_FLOAT, b.bht1());
  b.g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rowsum);
  b.binary(CUDNN_POINTWISE_MUL, rowsum, one, softmax_sum);
  // P, then dV = P^T dO
  const auto& S = b.tmp(CUDNN_DATA_FLOAT, b.bhtt());
  b.g.matmul(q, kt, S);
  const auto& S1 = b.binary(CUDNN_POINTWISE_MUL, S, scale, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& Ssub = b.binary(CUDNN_POINTWISE_SUB, S1, stats, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& Sm = b.causal(Ssub, neg_inf);
  const auto& P = b.unary(CUDNN_POINTWISE_EXP, Sm, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const Dims tt_t = b.transposed(dnn::packed(b.bhtt()));
  const auto& Pt = b.tmp(CUDNN_DATA_BFLOAT16, b.bhtt(), tt_t);
  b.g.reshape(P, Pt);
  b.g.matmul(Pt, dO, dV);
  // dS = scale * P * (dO V^T - D), then dK = dS^T Q
  const auto& dP = b.tmp(CUDNN_DATA_FLOAT, b.bhtt());
  b.g.matmul(dO, vt, dP);
  const auto& t1 = b.binary(CUDNN_POINTWISE_SUB, dP, softmax_sum, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& t2 = b.binary(CUDNN_POINTWISE_MUL, t1, P, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& dS = b.binary(CUDNN_POINTWISE_MUL, t2, scale, b.tmp(CUDNN_DATA_FLOAT, b.bhtt()));
  const auto& dSt = b.tmp(CUDNN_DATA_BFLOAT16, b.bhtt(), tt_t);
  b.g.reshape(dS, dSt);
  b.g.matmul(dSt, q, dK);
  // dQ = dS K
  const auto& kview = b.tmp(CUDNN_DATA_FLOAT, b.bhtd(), qs);
  b.g.reshape(kt, kview);
  if (repeatable) {
    b.g.matmul(dS, kview, dQ);
  } else {
    const auto& acc = b.f32(kDQAccum, b.bhtd());
    b.g.matmul(dS, kview, acc);
    b.unary(CUDNN_POINTWISE_IDENTITY, acc, dQ);
  }
  dnn::Plan plan = b.g.build();
  why = b.g.why();
  return plan;
}

enum class Dir { Forward, Backward, BackwardFast };

// Workspace layout, backward: [dQ accumulator fp32 (fast only) | softmax_sum
// fp32 | cuDNN's workspace]. It is the caller's attention workspace when that
// is large enough (it is sized by cudnn_attention_workspace_floats), else a
// buffer of the entry's own.
struct Entry {
  dnn::Plan plan;
  bool pinned = false;  // used by a CUDA graph's capture: kept (a replay runs its compiled kernels and workspace)
  int64_t acc_bytes = 0, sum_bytes = 0, total = 0;
  gpu::DeviceBuffer own;
  char* workspace(float* caller, int64_t caller_floats) {
    if (total <= caller_floats * 4) return reinterpret_cast<char*>(caller);
    if (!own.data()) own = gpu::DeviceBuffer(static_cast<size_t>(total), MemCategory::Scratch);
    return own.as<char>();
  }
};

constexpr int64_t round256(int64_t n) {
  return (n + 255) / 256 * 256;
}

// The plan for a shape and direction, built on first use; null if cuDNN has
// no engine for it (then parallm's kernels run).
Entry* plan_for(Dir dir, const Shape& s) {
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Entry>> cache;
  auto key = std::make_tuple(static_cast<int>(dir), s.B, s.T, s.NH, s.HS);
  if (auto it = cache.find(key); it != cache.end()) {
    it->second->pinned = it->second->pinned || gpu::capturing();
    return it->second.get();
  }
  if (cache.size() >= 64)  // sampling makes a shape per sequence length
    std::erase_if(cache, [](const auto& kv) { return !kv.second->pinned; });
  auto e = std::make_unique<Entry>();
  e->pinned = gpu::capturing();
  std::string why;
  try {
    e->plan = dir == Dir::Forward ? build_forward(s, why) : build_backward(s, dir == Dir::Backward, why);
  } catch (const CudaError& err) {  // an operation cuDNN refuses
    why = err.what();
  }
  const char* what = dir == Dir::Forward ? "forward" : dir == Dir::Backward ? "backward" : "backward (fast)";
  if (!e->plan.ok()) {
    log::warn("cuDNN attention {} for B={} T={} heads={}x{}: no engine ({}); parallm's kernels run instead", what, s.B,
              s.T, s.NH, s.HS, why);
    cache[key] = nullptr;
    return nullptr;
  }
  if (dir != Dir::Forward) {
    e->acc_bytes = dir == Dir::BackwardFast ? round256(s.B * s.NH * s.T * s.HS * 4) : 0;
    e->sum_bytes = round256(s.B * s.NH * s.T * 4);
  }
  e->total = e->acc_bytes + e->sum_bytes + e->plan.workspace_bytes();
  log::info("cuDNN attention {} for B={} T={} heads={}x{}: workspace {:.1f} MiB", what, s.B, s.T, s.NH, s.HS,
            static_cast<double>(e->total) / (1 << 20));
  return (cache[key] = std::move(e)).get();
}

int64_t g_calls = 0;
}  // namespace

int64_t cudnn_attention_workspace_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  // The repeatable backward's spilled dS (bf16, in 64 x 64 tiles) and
  // softmax_sum, as cuDNN 9.19 asks on an H100, and 1 MiB to spare.
  const int64_t t64 = (T + 63) / 64 * 64;
  const int64_t bytes = round256(B * NH * t64 * t64 * 2) + round256(B * NH * T * 4) + (1 << 20);
  return C % NH == 0 ? bytes / 4 : 0;
}

bool cudnn_attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, float* workspace, int64_t workspace_floats) {
  const Shape s{B, T, NH, C / NH};
  Entry* e = plan_for(Dir::Forward, s);
  if (!e) return false;
  float scale = 1.0f / std::sqrt(static_cast<float>(s.HS)), neg_inf = -INFINITY;
  auto* base = const_cast<bfloat16*>(qkv);
  dnn::Bindings bind;
  bind.add(kQ, base).add(kK, base + C).add(kV, base + 2 * C).add(kO, out).add(kStats, lse);
  bind.add(kScale, &scale).add(kNegInf, &neg_inf);
  e->plan.execute(bind, e->workspace(workspace, workspace_floats), "kernels.cuda.cudnn_attention_forward");
  ++g_calls;
  return true;
}

bool cudnn_attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, bool repeatable,
                              float* workspace, int64_t workspace_floats) {
  const Shape s{B, T, NH, C / NH};
  const Dir dir = repeatable ? Dir::Backward : Dir::BackwardFast;
  Entry* e = plan_for(dir, s);
  if (!e) return false;
  float scale = 1.0f / std::sqrt(static_cast<float>(s.HS)), neg_inf = -INFINITY, one = 1.0f;
  auto* base = const_cast<bfloat16*>(qkv);
  char* ws = e->workspace(workspace, workspace_floats);
  dnn::Bindings bind;
  bind.add(kQ, base).add(kK, base + C).add(kV, base + 2 * C);
  bind.add(kO, const_cast<bfloat16*>(out)).add(kDO, const_cast<bfloat16*>(dout)).add(kStats, const_cast<float*>(lse));
  bind.add(kDQ, dqkv).add(kDK, dqkv + C).add(kDV, dqkv + 2 * C);
  bind.add(kScale, &scale).add(kOne, &one).add(kNegInf, &neg_inf).add(kSoftmaxSum, ws + e->acc_bytes);
  if (dir == Dir::BackwardFast) {
    // cuDNN >= 9.6 initializes the accumulator itself, by cudnn-frontend's
    // reading; zeroed here all the same until measured otherwise.
    gpu::memset_zero(ws, static_cast<size_t>(e->acc_bytes));
    bind.add(kDQAccum, ws);
  }
  e->plan.execute(bind, ws + e->acc_bytes + e->sum_bytes, "kernels.cuda.cudnn_attention_backward");
  ++g_calls;
  return true;
}

bool cudnn_attention_built() {
  return true;
}
int64_t cudnn_attention_calls() {
  return g_calls;
}

}  // namespace parallm::kernels::cuda
