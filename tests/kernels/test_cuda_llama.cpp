// The Llama family's CUDA kernels (rmsnorm.h, rope.h, swiglu.h) against the
// CPU reference on odd shapes, in fp32 and with bf16 elements, and the
// backward's bits repeatable. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/gpu.h"
#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace parallm {
namespace {

using test::Cuda;
using test::Dev;
using test::expect_close;
using test::randv;
namespace kc = kernels::cuda;
namespace kr = kernels::ref;

std::vector<bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<bfloat16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i].bits = f32_to_bf16(v[i]);
  return b;
}
std::vector<float> from_bf16(const std::vector<bfloat16>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i].bits);
  return v;
}
// x rounded to bf16 and back: the inputs bf16 kernels see.
std::vector<float> rounded(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}
std::vector<float> table(int64_t T, int64_t D) {
  std::vector<float> t(static_cast<size_t>(T * D));
  for (int64_t r = 0; r < T; ++r)
    for (int64_t i = 0; i < D / 2; ++i) {
      t[r * D + i] = static_cast<float>(std::cos((r + 1) * std::pow(0.4, double(i))));
      t[r * D + D / 2 + i] = static_cast<float>(std::sin((r + 1) * std::pow(0.4, double(i))));
    }
  return t;
}

TEST_F(Cuda, RmsNormMatchesReferenceAndAccumulates) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{7, 13}, {300, 130}, {5, 2048}}) {
    auto x = randv(N * C, 1, 2.0f), w = randv(C, 2), dy = randv(N * C, 3), dx0 = randv(N * C, 4), dw0 = randv(C, 5);
    std::vector<float> y(N * C), r(N), dx = dx0, dw = dw0;
    kr::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-6f);
    kr::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    Dev<float> gx(x), gw(w), gdy(dy), gy(y), gr(r), gdx(dx0), gdw(dw0);
    kc::rmsnorm_forward(gy.p(), gr.p(), gx.p(), gw.p(), N, C, 1e-6f);
    kc::rmsnorm_backward(gdx.p(), gdw.p(), gdy.p(), gx.p(), gw.p(), gr.p(), N, C);
    expect_close(gy.back(), y, 1e-5, 1e-2, "rmsnorm out");
    expect_close(gdx.back(), dx, 1e-5, 1e-2, "rmsnorm dx");
    expect_close(gdw.back(), dw, 1e-4, 1e-2, "rmsnorm dw");
    // bf16 elements: inputs rounded, outputs at bf16's resolution.
    auto xb = to_bf16(x), wb = to_bf16(w), dyb = to_bf16(dy);
    std::vector<float> yr(N * C), rr(N), dxr(N * C, 0.0f), dwr(C, 0.0f);
    kr::rmsnorm_forward(yr.data(), rr.data(), rounded(x).data(), rounded(w).data(), N, C, 1e-6f);
    kr::rmsnorm_backward(dxr.data(), dwr.data(), rounded(dy).data(), rounded(x).data(), rounded(w).data(), rr.data(), N,
                         C);
    Dev<bfloat16> bx(xb), bw(wb), bdy(dyb), by{std::vector<bfloat16>(N * C)}, bdx(to_bf16(std::vector<float>(N * C)));
    Dev<float> br(r), bdw{std::vector<float>(C, 0.0f)};
    kc::rmsnorm_forward(by.p(), br.p(), bx.p(), bw.p(), N, C, 1e-6f);
    kc::rmsnorm_backward(bdx.p(), bdw.p(), bdy.p(), bx.p(), bw.p(), br.p(), N, C);
    expect_close(from_bf16(by.back()), yr, 1e-2, 1e-2, "bf16 rmsnorm out");
    expect_close(from_bf16(bdx.back()), dxr, 2e-2, 2e-2, "bf16 rmsnorm dx");
    expect_close(bdw.back(), dwr, 1e-3, 1e-2, "bf16 rmsnorm dw");
  }
}

TEST_F(Cuda, SwigluMatchesReference) {
  const int64_t n = 100003;
  auto g = randv(n, 6, 3.0f), u = randv(n, 7), dy = randv(n, 8);
  std::vector<float> y(n), dg(n), du(n);
  kr::swiglu_forward(y.data(), g.data(), u.data(), n);
  kr::swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  Dev<float> gg(g), gu(u), gdy(dy), gy(y), gdg(dg), gdu(du);
  kc::swiglu_forward(gy.p(), gg.p(), gu.p(), n);
  kc::swiglu_backward(gdg.p(), gdu.p(), gdy.p(), gg.p(), gu.p(), n);
  expect_close(gy.back(), y, 1e-5, 1e-2, "swiglu out");
  expect_close(gdg.back(), dg, 1e-5, 1e-2, "swiglu dgate");
  expect_close(gdu.back(), du, 1e-5, 1e-2, "swiglu dup");
  std::vector<float> yr(n);
  kr::swiglu_forward(yr.data(), rounded(g).data(), rounded(u).data(), n);
  Dev<bfloat16> bg(to_bf16(g)), bu(to_bf16(u)), by{std::vector<bfloat16>(n)};
  kc::swiglu_forward(by.p(), bg.p(), bu.p(), n);
  expect_close(from_bf16(by.back()), yr, 1e-2, 1e-2, "bf16 swiglu out");
}

TEST_F(Cuda, RopePackMatchesReferenceAndRepeats) {
  struct S {
    int64_t B, T, H, KV, D;
  };
  for (S s : {S{2, 5, 6, 2, 10}, S{1, 33, 8, 8, 64}, S{3, 7, 4, 1, 128}}) {
    const int64_t N = s.B * s.T, C = s.H * s.D, K = s.KV * s.D;
    auto q = randv(N * C, 9), k = randv(N * K, 10), v = randv(N * K, 11), d = randv(N * 3 * C, 12);
    const auto t = table(s.T, s.D);
    std::vector<float> qkv(N * 3 * C), dq(N * C), dk(N * K), dv(N * K);
    kr::rope_pack_forward(qkv.data(), q.data(), k.data(), v.data(), t.data(), s.B, s.T, s.H, s.KV, s.D);
    kr::rope_pack_backward(dq.data(), dk.data(), dv.data(), d.data(), t.data(), s.B, s.T, s.H, s.KV, s.D);
    Dev<float> gq(q), gk(k), gv(v), gd(d), gt(t), gqkv(qkv), gdq(dq), gdk(dk), gdv(dv);
    kc::rope_pack_forward(gqkv.p(), gq.p(), gk.p(), gv.p(), gt.p(), s.B, s.T, s.H, s.KV, s.D);
    kc::rope_pack_backward(gdq.p(), gdk.p(), gdv.p(), gd.p(), gt.p(), s.B, s.T, s.H, s.KV, s.D);
    expect_close(gqkv.back(), qkv, 1e-5, 1e-2, "rope pack");
    expect_close(gdq.back(), dq, 1e-5, 1e-2, "rope dq");
    expect_close(gdk.back(), dk, 1e-5, 1e-2, "rope dk");
    expect_close(gdv.back(), dv, 1e-5, 1e-2, "rope dv");
    const auto dk1 = gdk.back();
    kc::rope_pack_backward(gdq.p(), gdk.p(), gdv.p(), gd.p(), gt.p(), s.B, s.T, s.H, s.KV, s.D);
    EXPECT_EQ(gdk.back(), dk1) << "the backward's bits repeat";
    std::vector<float> qkvr(N * 3 * C);
    kr::rope_pack_forward(qkvr.data(), rounded(q).data(), rounded(k).data(), rounded(v).data(), t.data(), s.B, s.T, s.H,
                          s.KV, s.D);
    Dev<bfloat16> bq(to_bf16(q)), bk(to_bf16(k)), bv(to_bf16(v)), bqkv{std::vector<bfloat16>(N * 3 * C)};
    kc::rope_pack_forward(bqkv.p(), bq.p(), bk.p(), bv.p(), gt.p(), s.B, s.T, s.H, s.KV, s.D);
    expect_close(from_bf16(bqkv.back()), qkvr, 1e-2, 1e-2, "bf16 rope pack");
  }
}

}  // namespace
}  // namespace parallm
