// Finite-difference gradient checks of every reference kernel's backward.
// The loss is L = sum(out * R) for a fixed random R; central differences in
// fp32 with step 1e-2 on a sample of inputs, compared at ~1e-2 relative.
#include <omp.h>

#include <functional>

#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::randv;

using parallm::test::dotv;
using parallm::test::fd_check;

TEST(GradCheck, Matmul) {
  const int64_t N = 5, IN = 7, OUT = 6;
  auto x = randv(N * IN, 1), w = randv(OUT * IN, 2), b = randv(OUT, 3), R = randv(N * OUT, 4);
  std::vector<float> out(N * OUT), dx(N * IN), dw(OUT * IN, 0.0f), db(OUT, 0.0f);
  auto loss = [&] {
    ref::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IN, OUT);
    return dotv(out, R);
  };
  ref::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IN, OUT);
  fd_check(x, dx, loss, "dx");
  fd_check(w, dw, loss, "dw");
  fd_check(b, db, loss, "db");
}

TEST(GradCheck, LayerNorm) {
  const int64_t N = 4, C = 9;
  auto x = randv(N * C, 5), w = randv(C, 6), b = randv(C, 7), R = randv(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dotv(out, R);
  };
  loss();
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                          C);
  fd_check(x, dx, loss, "dx", 1e-3f);
  fd_check(w, dw, loss, "dw");
  fd_check(b, db, loss, "db");
}

TEST(GradCheck, Gelu) {
  for (auto kind : {GeluKind::Exact, GeluKind::Tanh}) {
    const int64_t n = 50;
    auto x = randv(n, 9, 2.0f), R = randv(n, 10);
    std::vector<float> out(n), dx(n);
    auto loss = [&] {
      ref::gelu_forward(out.data(), x.data(), n, kind);
      return dotv(out, R);
    };
    ref::gelu_backward(dx.data(), x.data(), R.data(), n, kind);
    fd_check(x, dx, loss, "gelu dx", 1e-3f);
  }
}

TEST(GradCheck, AttentionIncludingDropout) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  for (float p : {0.0f, 0.4f}) {
    AttnDropout d{p, 11, 12};
    auto qkv = randv(B * T * 3 * C, 11), R = randv(B * T * C, 12);
    std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
    std::vector<float> ws(ref::attention_workspace_floats(B, T, C, NH, omp_get_max_threads()));
    auto loss = [&] {
      ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, d, ws.data());
      return dotv(out, R);
    };
    loss();
    ref::attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, d, ws.data());
    fd_check(qkv, dqkv, loss, "dqkv", 1e-3f);
  }
}

TEST(GradCheck, Classifier) {
  const int64_t N = 6, C = 5, V = 11;
  auto x = randv(N * C, 13), w = randv(V * C, 14);
  std::vector<int32_t> tgt{0, 3, 10, 7, 7, 1};
  std::vector<float> losses(N), dx(N * C), dw(V * C, 0.0f), ws(ref::classifier_workspace_floats(N, V, 1));
  auto loss = [&] {
    ref::classifier_forward_backward(losses.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 1.0f,
                                     ws.data());
    double s = 0;
    for (float l : losses) s += l;
    return s / N;
  };
  ref::classifier_forward_backward(losses.data(), dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V,
                                   1.0f / N, ws.data());
  fd_check(x, dx, loss, "dx", 1e-3f);
  fd_check(w, dw, loss, "dwte", 1e-3f);
}

TEST(GradCheck, Embedding) {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tok{1, 4, 1, 0, 2, 1};
  auto wte = randv(V * C, 15), wpe = randv(T * C, 16), R = randv(B * T * C, 17);
  std::vector<float> out(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  auto loss = [&] {
    ref::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dotv(out, R);
  };
  ref::embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  fd_check(wte, dwte, loss, "dwte");
  fd_check(wpe, dwpe, loss, "dwpe");
}
