// The KV cache (kv_cache.h): rows appended by copy, attention by the block kernel.
#include "model/kv_cache.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace parallm::model {

KvCache::KvCache(const GPTConfig& cfg, Device dev, int threads)
    : cap_(cfg.block_size), H_(cfg.n_head), D_(cfg.head_size()) {
  const int64_t A = H_ * D_;
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    k_.emplace_back(static_cast<size_t>(cap_ * A), MemCategory::Activations, dev);
    v_.emplace_back(static_cast<size_t>(cap_ * A), MemCategory::Activations, dev);
  }
  const auto& ops = kernels::ops_for(dev);
  ws_ = DeviceArray<float>(static_cast<size_t>(ops.attention_block_workspace_floats(1, H_, cap_, cap_, D_, threads)),
                           MemCategory::Scratch, dev);
}

void KvCache::attend(const kernels::ModelOps<float>& k, int64_t l, float* out, float* lse, const float* qkv,
                     int64_t n) {
  PARALLM_CHECK(len_ + n <= cap_, ShapeError, "model.kv_cache", "{} cached and {} new positions exceed the {} held",
                len_, n, cap_);
  const int64_t A = H_ * D_;
  float* kc = k_[static_cast<size_t>(l)].data();
  float* vc = v_[static_cast<size_t>(l)].data();
  k.copy_rows(kc + len_ * A, A, qkv + A, 3 * A, A, n);
  k.copy_rows(vc + len_ * A, A, qkv + 2 * A, 3 * A, A, n);
  kernels::AttnBlock blk;
  blk.B = 1;
  blk.NH = H_;
  blk.HS = D_;
  blk.Tq = n;
  blk.Tk = len_ + n;
  blk.q0 = len_;
  blk.k0 = 0;
  blk.T = len_ + n;
  blk.q_ld = 3 * A;
  blk.q_bs = n * 3 * A;
  blk.kv_ld = A;
  blk.kv_bs = cap_ * A;
  blk.o_ld = A;
  blk.o_bs = n * A;
  blk.lse_ld = n;
  blk.first = true;
  k.attention_block_forward(out, lse, qkv, kc, vc, blk, kernels::AttnDropout{}, ws_.data());
}

}  // namespace parallm::model
