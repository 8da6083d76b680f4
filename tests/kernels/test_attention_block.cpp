// Context parallelism's attention blocks (attention.h, AttnBlock) on the CPU:
// one causal attention problem cut into chunks of positions and run block by
// block (zigzag over 2-4 ranks in ring order, uneven cuts in any order, key
// cuts other than the query cut) gives the unsplit kernels' out, lse, dq, dk
// and dv; empty blocks change nothing; results do not depend on the thread
// count. Also the tables' strided copy and fill.
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>

#include "attention_block_plan.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/ops.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::BlockTensors;
using parallm::test::Chunk;
using parallm::test::cut;
using parallm::test::Plan;
using parallm::test::randv;

namespace {

struct Problem {
  int64_t B = 1, NH = 3, HS = 12, T = 64;
  AttnDropout drop{};
  bool separate_kv = false;  // k | v in their own [B, T, 2C] buffer, not qkv's
  int64_t C() const { return NH * HS; }
  std::string name() const {
    return "B=" + std::to_string(B) + " NH=" + std::to_string(NH) + " HS=" + std::to_string(HS) +
           " T=" + std::to_string(T) + " p=" + std::to_string(drop.p) + (separate_kv ? " separate kv" : " qkv");
  }
};

// Columns [c0, c0 + width) of rows rows of a buffer of row stride ld, as a dense [rows, width].
std::vector<float> columns(const std::vector<float>& x, int64_t rows, int64_t ld, int64_t c0, int64_t width) {
  std::vector<float> r(rows * width);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < width; ++c) r[i * width + c] = x[i * ld + c0 + c];
  return r;
}

// The five results, each dense: out, dq, dk, dv [B, T, C], lse [B, NH, T].
struct Results {
  std::vector<float> out, lse, dq, dk, dv;
};

// Inputs of a problem: qkv [B, T, 3C] and dout [B, T, C].
struct Inputs {
  std::vector<float> qkv, dy;
  explicit Inputs(const Problem& p)
      : qkv(randv(p.B * p.T * 3 * p.C(), 300 + p.T)), dy(randv(p.B * p.T * p.C(), 400 + p.T)) {}
};

Results unsplit(const Problem& p, const Inputs& in) {
  const int64_t B = p.B, T = p.T, C = p.C();
  Results r;
  r.out.resize(B * T * C);
  r.lse.resize(B * p.NH * T);
  std::vector<float> dqkv(B * T * 3 * C), ws(cpu::attention_workspace_floats(B, T, C, p.NH, omp_get_max_threads()));
  cpu::attention_forward(r.out.data(), r.lse.data(), in.qkv.data(), B, T, C, p.NH, p.drop, ws.data());
  cpu::attention_backward(dqkv.data(), in.dy.data(), in.qkv.data(), r.out.data(), r.lse.data(), B, T, C, p.NH, p.drop,
                          ws.data());
  r.dq = columns(dqkv, B * T, 3 * C, 0, C);
  r.dk = columns(dqkv, B * T, 3 * C, C, C);
  r.dv = columns(dqkv, B * T, 3 * C, 2 * C, C);
  return r;
}

// The plan through the cpu block kernels: out and lse start as NaN (the first blocks write them), dq, dk, dv as 0.
Results blocked(const Problem& p, const Inputs& in, const Plan& plan) {
  const int64_t B = p.B, T = p.T, C = p.C();
  std::vector<float> kv;  // separate k | v
  if (p.separate_kv) kv = columns(in.qkv, B * T, 3 * C, C, 2 * C);
  std::vector<float> out(B * T * C, NAN), lse(B * p.NH * T, NAN), dqkv(B * T * 3 * C, 0.0f),
      dkv(p.separate_kv ? B * T * 2 * C : 0, 0.0f);
  int64_t wsn = 0;
  for (const auto& v : plan)
    for (const Chunk& k : v.keys)
      wsn = std::max(wsn, cpu::attention_block_workspace_floats(B, p.NH, v.q.len, k.len, p.HS, omp_get_max_threads()));
  std::vector<float> ws(wsn);
  BlockTensors t;
  t.q = in.qkv.data();
  t.k = p.separate_kv ? kv.data() : in.qkv.data() + C;
  t.v = t.k + C;
  t.dout = in.dy.data();
  t.out = out.data();
  t.lse = lse.data();
  t.dq = dqkv.data();
  t.dk = p.separate_kv ? dkv.data() : dqkv.data() + C;
  t.dv = t.dk + C;
  t.ws = ws.data();
  t.q_ld = 3 * C;
  t.kv_ld = p.separate_kv ? 2 * C : 3 * C;
  t.o_ld = C;
  test::plan_forward(plan, B, p.NH, p.HS, T, t, p.drop, &cpu::attention_block_forward);
  test::plan_backward(plan, B, p.NH, p.HS, T, t, p.drop, &cpu::attention_block_backward);
  Results r;
  r.out = out;
  r.lse = lse;
  r.dq = columns(dqkv, B * T, 3 * C, 0, C);
  if (p.separate_kv) {
    r.dk = columns(dkv, B * T, 2 * C, 0, C);
    r.dv = columns(dkv, B * T, 2 * C, C, C);
    EXPECT_EQ(columns(dqkv, B * T, 3 * C, C, 2 * C), std::vector<float>(B * T * 2 * C, 0.0f))
        << "dk, dv went to qkv's gradient, not the separate buffer";
  } else {
    r.dk = columns(dqkv, B * T, 3 * C, C, C);
    r.dv = columns(dqkv, B * T, 3 * C, 2 * C, C);
  }
  return r;
}

// max |got - want| <= tol * max |want|, every element finite.
void expect_near_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  size_t wi = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": non-finite at " << i;
    const double e = std::fabs(double(got[i]) - want[i]);
    if (e > worst) worst = e, wi = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst at " << wi << " got " << got[wi] << " want " << want[wi]
                                << " (max |want| " << scale << ")";
}

void expect_matches(const Results& got, const Results& want, const std::string& what) {
  expect_near_scaled(got.out, want.out, 1e-5, what + ": out");
  expect_near_scaled(got.lse, want.lse, 1e-5, what + ": lse");
  expect_near_scaled(got.dq, want.dq, 1e-5, what + ": dq");
  expect_near_scaled(got.dk, want.dk, 1e-5, what + ": dk");
  expect_near_scaled(got.dv, want.dv, 1e-5, what + ": dv");
}

std::vector<Problem> problems(int64_t T) {
  std::vector<Problem> ps;
  for (int64_t B : {1, 3})
    for (auto [NH, HS] : {std::pair<int64_t, int64_t>{3, 12}, {2, 16}})
      for (float pd : {0.0f, 0.1f})
        for (bool sep : {false, true}) {
          Problem p;
          p.B = B, p.NH = NH, p.HS = HS, p.T = T, p.separate_kv = sep;
          // With dropout, the call's heads sit at an offset in a larger global (sample, head) grid.
          p.drop = pd > 0 ? AttnDropout{pd, 77, 5, 7, NH + 2} : AttnDropout{};
          ps.push_back(p);
        }
  return ps;
}

}  // namespace

TEST(AttentionBlock, ZigzagInRingOrderMatchesUnsplitAttention) {
  // Chunks of 37 (two query blocks of 32 rows, the second partial), 11 and 8 rows.
  for (auto [ranks, len] : {std::pair<int64_t, int64_t>{2, 37}, {3, 11}, {4, 8}}) {
    const int64_t T = 2 * ranks * len;
    const Plan plan = test::zigzag_plan(T, ranks);
    for (const Problem& p : problems(T)) {
      const Inputs in(p);
      expect_matches(blocked(p, in, plan), unsplit(p, in), "zigzag over " + std::to_string(ranks) + ", " + p.name());
    }
  }
}

TEST(AttentionBlock, UnevenCutsInAnyOrderMatchUnsplitAttention) {
  const auto qcut = cut({5, 37, 1, 21});
  const int64_t T = 64;
  struct Way {
    std::vector<Chunk> kcut;
    bool reversed;
    const char* name;
  };
  // Reversed, a query chunk's first block is one wholly after it (out = 0, lse = -inf, then merged into);
  // with another key cut, blocks are partly visible and some rows see nothing in their first block.
  for (const Way& w :
       {Way{qcut, false, "in order"}, Way{qcut, true, "reversed"}, Way{cut({20, 44}), false, "keys cut 20|44"},
        Way{cut({13, 13, 2, 36}), true, "keys cut 13|13|2|36, reversed"}}) {
    const Plan plan = test::all_pairs_plan(qcut, w.kcut, test::iota_order(w.kcut.size(), w.reversed));
    for (const Problem& p : problems(T)) {
      const Inputs in(p);
      expect_matches(blocked(p, in, plan), unsplit(p, in), std::string("uneven cut, ") + w.name + ", " + p.name());
    }
  }
}

TEST(AttentionBlock, BlockAfterTheQueriesChangesNothing) {
  const int64_t B = 2, NH = 3, HS = 12, C = NH * HS, T = 40;
  auto qkv = randv(B * T * 3 * C, 500), dy = randv(B * T * C, 501);
  auto out = randv(B * T * C, 502), lse = randv(B * NH * T, 503), dqkv = randv(B * T * 3 * C, 504);
  const auto out0 = out, lse0 = lse, dqkv0 = dqkv;
  std::vector<float> ws(cpu::attention_block_workspace_floats(B, NH, 10, 25, HS, omp_get_max_threads()));
  BlockTensors t;
  t.q = qkv.data(), t.k = qkv.data() + C, t.v = qkv.data() + 2 * C, t.dout = dy.data();
  t.out = out.data(), t.lse = lse.data(), t.dq = dqkv.data(), t.dk = dqkv.data() + C, t.dv = dqkv.data() + 2 * C;
  t.ws = ws.data(), t.q_ld = 3 * C, t.kv_ld = 3 * C, t.o_ld = C;
  const Chunk q{5, 10}, k{15, 25};  // query rows 5..14, key rows 15..39: none visible
  for (float pd : {0.0f, 0.1f}) {
    const AttnDropout drop{pd, 9, 3};
    // Not the first block: a merge of nothing.
    cpu::attention_block_forward(t.out + q.start * C, t.lse + q.start, t.q + q.start * 3 * C, t.k + k.start * 3 * C,
                                 t.v + k.start * 3 * C, test::block_of(B, NH, HS, T, t, q, k, false), drop, t.ws);
    test::plan_backward({{q, {k}}}, B, NH, HS, T, t, drop, &cpu::attention_block_backward);
    EXPECT_EQ(out, out0);
    EXPECT_EQ(lse, lse0);
    EXPECT_EQ(dqkv, dqkv0);
  }
  // As a first block it writes the empty result: out = 0, lse = -inf on its rows, nothing else.
  test::plan_forward({{q, {k}}}, B, NH, HS, T, t, AttnDropout{}, &cpu::attention_block_forward);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const bool mine = i >= q.start && i < q.start + q.len;
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(out[(b * T + i) * C + c], mine ? 0.0f : out0[(b * T + i) * C + c]) << b << " " << i << " " << c;
      for (int64_t h = 0; h < NH; ++h)
        ASSERT_EQ(lse[(b * NH + h) * T + i],
                  mine ? -std::numeric_limits<float>::infinity() : lse0[(b * NH + h) * T + i]);
    }
}

// A row whose running lse is -inf takes the block's values, whatever its out holds.
TEST(AttentionBlock, RowsWithMinusInfinityLseTakeTheBlock) {
  const int64_t B = 2, NH = 3, HS = 12, C = NH * HS, T = 50;
  auto qkv = randv(B * T * 3 * C, 510), dy = randv(B * T * C, 511);
  std::vector<float> out1(B * T * C, 0.0f), lse1(B * NH * T, 0.0f), out2(B * T * C, NAN),
      lse2(B * NH * T, -std::numeric_limits<float>::infinity());
  std::vector<float> ws(cpu::attention_block_workspace_floats(B, NH, 30, 40, HS, omp_get_max_threads()));
  BlockTensors t;
  t.q = qkv.data(), t.k = qkv.data() + C, t.v = qkv.data() + 2 * C, t.dout = dy.data(), t.ws = ws.data();
  t.q_ld = 3 * C, t.kv_ld = 3 * C, t.o_ld = C;
  const Chunk q{20, 30}, k{10, 40};  // a partly visible block: query rows 20..49, key rows 10..49
  const AttnDropout drop{0.1f, 4, 2};
  for (bool first : {true, false}) {
    float* out = first ? out1.data() : out2.data();
    float* lse = first ? lse1.data() : lse2.data();
    cpu::attention_block_forward(out + q.start * C, lse + q.start, t.q + q.start * 3 * C, t.k + k.start * 3 * C,
                                 t.v + k.start * 3 * C, test::block_of(B, NH, HS, T, t, q, k, first), drop, t.ws);
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = q.start; i < T; ++i) {
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out2[(b * T + i) * C + c], out1[(b * T + i) * C + c]) << b << " " << i;
      for (int64_t h = 0; h < NH; ++h)
        ASSERT_EQ(lse2[(b * NH + h) * T + i], lse1[(b * NH + h) * T + i]) << b << " " << i;
    }
}

TEST(AttentionBlock, ResultsDoNotDependOnTheThreadCount) {
  Problem p;
  p.B = 3, p.NH = 3, p.HS = 12, p.T = 2 * 2 * 37;
  p.drop = AttnDropout{0.1f, 77, 5, 3, 0};
  const Inputs in(p);
  const Plan plan = test::zigzag_plan(p.T, 2);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  const Results one = blocked(p, in, plan);
  omp_set_num_threads(2);
  const Results two = blocked(p, in, plan);
  omp_set_num_threads(nt);
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.lse, two.lse);
  EXPECT_EQ(one.dq, two.dq);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
}

TEST(AttentionBlock, BadGeometryIsAShapeError) {
  const int64_t HS = 4;
  std::vector<float> x(64), ws(cpu::attention_block_workspace_floats(1, 1, 4, 4, HS, omp_get_max_threads()));
  AttnBlock blk;
  blk.B = 1, blk.NH = 1, blk.HS = HS, blk.Tq = 4, blk.Tk = 4, blk.q0 = 2, blk.k0 = 0, blk.T = 5;  // rows 2..5 of 5
  blk.q_ld = blk.kv_ld = blk.o_ld = HS, blk.lse_ld = 5;
  EXPECT_THROW(cpu::attention_block_forward(x.data(), x.data(), x.data(), x.data(), x.data(), blk, {}, ws.data()),
               ShapeError);
}

TEST(CopyRows, CpuTableCopiesRowsAndFills) {
  const Ops& k = ops_for(Device::cpu());
  ASSERT_NE(k.copy_rows, nullptr);
  ASSERT_NE(k.fill, nullptr);
  EXPECT_NE(k.attention_block_forward, nullptr);
  EXPECT_NE(k.attention_block_backward, nullptr);
  EXPECT_NE(k.attention_block_workspace_floats, nullptr);
  const auto src = randv(7 * 11, 600);
  std::vector<float> dst(7 * 9, -1.0f);
  k.copy_rows(dst.data() + 2, 9, src.data() + 3, 11, 5, 7);  // columns 3..7 of src's rows to columns 2..6 of dst's
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 9; ++c)
      ASSERT_EQ(dst[r * 9 + c], c >= 2 && c < 7 ? src[r * 11 + 3 + c - 2] : -1.0f) << r << " " << c;
  k.fill(dst.data() + 1, 60, 2.5f);
  EXPECT_EQ(dst[0], -1.0f);
  for (int64_t i = 1; i < 61; ++i) ASSERT_EQ(dst[i], 2.5f) << i;
  EXPECT_EQ(dst[61], -1.0f);
  EXPECT_EQ(dst[62], -1.0f);
  // bf16 elements (the cuda bf16 table's; the cpu kernels exist for them too).
  std::vector<bfloat16> hb(4 * 6, bfloat16{0}), hs(4 * 3);
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = bfloat16{static_cast<uint16_t>(1000 + i)};
  cpu::copy_rows(hb.data() + 1, 6, hs.data(), 3, 3, 4);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c)
      ASSERT_EQ(hb[r * 6 + c].bits, c >= 1 && c < 4 ? 1000 + r * 3 + c - 1 : 0) << r << " " << c;
  cpu::fill(hb.data(), 5, -0.75f);
  for (int64_t i = 0; i < 5; ++i) ASSERT_EQ(hb[i].bits, f32_to_bf16(-0.75f));
  EXPECT_EQ(hb[5].bits, 0);
}
