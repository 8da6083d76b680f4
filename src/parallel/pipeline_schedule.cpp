// Pipeline schedules as data: the four generators, the shape rules, the
// simulator that checks any list of actions and times it, the closed-form
// bubbles and the text timeline.
//
// Generators. Each rank's list is built from its compute actions by one
// helper (ListBuilder) that puts the receive of a compute's input right
// before it and the send of its output right after it, so the generators
// only order computations, as the papers' figures do:
//   GPipe        all m forwards, then the m backwards in micro-batch order;
//   1F1B         Megatron's PipeDream-flush: min(p-r-1, m) warm-up forwards,
//                then forward/backward pairs, then the cool-down backwards;
//   interleaved  Megatron's looped 1F1B: the k-th forward of a rank is
//                micro-batch (k / pV) p + k % p of chunk (k % pV) / p, the
//                k-th backward the same with the chunks reversed; warm-up
//                (p-r-1)2 + (V-1)p forwards; needs m % p == 0;
//   ZB-H1        1F1B with the backward split into B and W (Qi et al. 2023,
//                section 2.1): rank r runs its first r forward/B pairs
//                without W, then F, B, W each round, and the r deferred Ws
//                at the end, where 1F1B would idle. Every rank then holds at
//                most p micro-batches whose W is pending (1F1B: p - r), the
//                activations of at most p - r (B pending) as in 1F1B.
//
// Simulator. Each rank runs its list in order with its own clock: a compute
// action takes its cost, a send stamps its message with the clock and never
// waits, a receive waits until the matching send's time. Ranks are advanced
// in turn until none can move; since a rank's times depend only on its own
// list and the stamps of its incoming messages, the order of turns does not
// change any time. A static pass over each list first checks what each
// action needs (fields in range, the right peer, the forward before its
// backward, the input received before its compute); the run then checks the
// pairing per (sender, receiver, kind) and finds deadlocks.
#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace parallm::parallel {

namespace {

bool is_compute(ActKind k) {
  return k == ActKind::Forward || k == ActKind::Backward || k == ActKind::BackwardInput || k == ActKind::BackwardWeight;
}
bool is_act(ActKind k) {
  return k == ActKind::SendAct || k == ActKind::RecvAct;
}
bool is_send(ActKind k) {
  return k == ActKind::SendAct || k == ActKind::SendGrad;
}

// A rank's list, built from its compute actions: the receive of each input
// right before the compute, the send of each output right after it.
class ListBuilder {
 public:
  ListBuilder(const PipeShape& s, int rank) : s_(s), rank_(rank) {}

  void forward(int micro, int chunk) {
    const int st = virtual_stage(s_, rank_, chunk);
    if (st > 0) add(ActKind::RecvAct, micro, chunk, stage_rank(s_, st - 1));
    add(ActKind::Forward, micro, chunk);
    if (st < num_stages(s_) - 1) add(ActKind::SendAct, micro, chunk, stage_rank(s_, st + 1));
  }
  // Backward, or BackwardInput: both take the output's gradient and give the input's.
  void backward(int micro, int chunk, ActKind kind = ActKind::Backward) {
    const int st = virtual_stage(s_, rank_, chunk);
    if (st < num_stages(s_) - 1) add(ActKind::RecvGrad, micro, chunk, stage_rank(s_, st + 1));
    add(kind, micro, chunk);
    if (st > 0) add(ActKind::SendGrad, micro, chunk, stage_rank(s_, st - 1));
  }
  void weight(int micro, int chunk) { add(ActKind::BackwardWeight, micro, chunk); }
  std::vector<Action> take() { return std::move(list_); }

 private:
  void add(ActKind kind, int micro, int chunk, int peer = -1) { list_.push_back({kind, micro, chunk, peer}); }
  const PipeShape& s_;
  int rank_;
  std::vector<Action> list_;
};

void gpipe(ListBuilder& l, const PipeShape& s) {
  for (int i = 0; i < s.m; ++i) l.forward(i, 0);
  for (int i = 0; i < s.m; ++i) l.backward(i, 0);
}

void one_f_one_b(ListBuilder& l, const PipeShape& s, int rank) {
  const int warm = std::min(s.p - rank - 1, s.m);
  for (int i = 0; i < warm; ++i) l.forward(i, 0);
  for (int i = 0; i < s.m - warm; ++i) {
    l.forward(warm + i, 0);
    l.backward(i, 0);
  }
  for (int i = s.m - warm; i < s.m; ++i) l.backward(i, 0);
}

// ZB-H1: 1F1B's order with B for the backward, and W deferred by `rank` rounds.
void zb_h1(ListBuilder& l, const PipeShape& s, int rank) {
  const int warm = std::min(s.p - rank - 1, s.m);
  int f = 0, w = 0;
  while (f < warm) l.forward(f++, 0);
  for (int i = 0; i < s.m; ++i) {
    if (f < s.m) l.forward(f++, 0);
    l.backward(i, 0, ActKind::BackwardInput);
    if (i >= rank) l.weight(w++, 0);
  }
  while (w < s.m) l.weight(w++, 0);
}

// Megatron's interleaved order: the k-th forward (or backward) of any rank.
struct MicroChunk {
  int micro, chunk;
};
MicroChunk interleaved_at(const PipeShape& s, int k, bool forward) {
  const int round = s.p * s.v, chunk = (k % round) / s.p;
  return {(k / round) * s.p + k % s.p, forward ? chunk : s.v - 1 - chunk};
}

void interleaved(ListBuilder& l, const PipeShape& s, int rank) {
  const int total = s.m * s.v, warm = std::min((s.p - rank - 1) * 2 + (s.v - 1) * s.p, total);
  auto fwd = [&](int k) {
    const auto x = interleaved_at(s, k, true);
    l.forward(x.micro, x.chunk);
  };
  auto bwd = [&](int k) {
    const auto x = interleaved_at(s, k, false);
    l.backward(x.micro, x.chunk);
  };
  for (int k = 0; k < warm; ++k) fwd(k);
  for (int k = 0; k < total - warm; ++k) {
    fwd(k + warm);
    bwd(k);
  }
  for (int k = total - warm; k < total; ++k) bwd(k);
}

void check_costs(const PipeCosts& c) {
  for (double x : {c.f, c.b, c.w})
    PARALLM_CHECK(std::isfinite(x) && x >= 0, ConfigError, "pipeline",
                  "costs must be finite and >= 0, got f={} b={} w={}", c.f, c.b, c.w);
}

}  // namespace

const char* pipe_kind_name(PipeKind k) {
  switch (k) {
    case PipeKind::GPipe:
      return "gpipe";
    case PipeKind::OneFOneB:
      return "1f1b";
    case PipeKind::Interleaved:
      return "interleaved";
    case PipeKind::ZeroBubble:
      return "zb-h1";
  }
  return "?";
}

PipeKind parse_pipe_kind(const std::string& name) {
  for (PipeKind k : {PipeKind::GPipe, PipeKind::OneFOneB, PipeKind::Interleaved, PipeKind::ZeroBubble})
    if (name == pipe_kind_name(k)) return k;
  throw ConfigError("config", fmt::format("parallel.pp_schedule: unknown schedule \"{}\"; the choices are "
                                          "gpipe|1f1b|interleaved|zb-h1",
                                          name));
}

const char* act_kind_name(ActKind k) {
  switch (k) {
    case ActKind::Forward:
      return "F";
    case ActKind::Backward:
      return "B";
    case ActKind::BackwardInput:
      return "Bi";
    case ActKind::BackwardWeight:
      return "W";
    case ActKind::SendAct:
      return "send_act";
    case ActKind::RecvAct:
      return "recv_act";
    case ActKind::SendGrad:
      return "send_grad";
    case ActKind::RecvGrad:
      return "recv_grad";
  }
  return "?";
}

std::string describe(const Action& a) {
  std::string s = fmt::format("{} micro {} chunk {}", act_kind_name(a.kind), a.micro, a.chunk);
  if (!is_compute(a.kind)) s += fmt::format(" {} rank {}", is_send(a.kind) ? "to" : "from", a.peer);
  return s;
}

void check_pipe_shape(const PipeShape& s) {
  require_positive(s.p, "parallel.pp");
  require_positive(s.m, "optimizer.gas");
  require_positive(s.v, "parallel.pp_virtual");
  const char* name = pipe_kind_name(s.kind);
  if (s.kind != PipeKind::Interleaved) {
    PARALLM_CHECK(s.v == 1, ConfigError, "config",
                  "parallel.pp_virtual={} needs parallel.pp_schedule=interleaved (parallel.pp_schedule={} runs one "
                  "chunk per rank)",
                  s.v, name);
    return;
  }
  PARALLM_CHECK(s.p >= 2, ConfigError, "config",
                "parallel.pp_schedule=interleaved needs parallel.pp >= 2 ranks, got {}", s.p);
  PARALLM_CHECK(s.v >= 2, ConfigError, "config",
                "parallel.pp_schedule=interleaved needs parallel.pp_virtual >= 2 chunks per rank, got {}", s.v);
  PARALLM_CHECK(s.m % s.p == 0, ConfigError, "config",
                "parallel.pp_schedule=interleaved needs optimizer.gas ({}) to be a multiple of parallel.pp ({})", s.m,
                s.p);
}

std::vector<Action> pipe_forward_actions(const PipeShape& s, int rank) {
  PARALLM_CHECK(s.p >= 1 && s.v >= 1 && rank >= 0 && rank < s.p, InternalError, "pipeline",
                "rank {} of p={} with v={} chunks", rank, s.p, s.v);
  ListBuilder l(s, rank);
  for (int c = 0; c < s.v; ++c) l.forward(0, c);
  return l.take();
}

std::vector<Action> pipe_actions(const PipeShape& s, int rank) {
  check_pipe_shape(s);
  PARALLM_CHECK(rank >= 0 && rank < s.p, InternalError, "pipeline", "rank {} is outside [0, {})", rank, s.p);
  ListBuilder l(s, rank);
  switch (s.kind) {
    case PipeKind::GPipe:
      gpipe(l, s);
      break;
    case PipeKind::OneFOneB:
      one_f_one_b(l, s, rank);
      break;
    case PipeKind::Interleaved:
      interleaved(l, s, rank);
      break;
    case PipeKind::ZeroBubble:
      zb_h1(l, s, rank);
      break;
  }
  return l.take();
}

double bubble_formula(const PipeShape& s, const PipeCosts& c) {
  check_pipe_shape(s);
  check_costs(c);
  switch (s.kind) {
    case PipeKind::GPipe:
    case PipeKind::OneFOneB:
      return (s.p - 1) * (c.f + c.b + c.w);
    case PipeKind::Interleaved:
      return (s.p - 1) * (c.f + c.b + c.w) / s.v;
    case PipeKind::ZeroBubble:
      return (s.p - 1) * (c.f + c.b) - (std::min(s.m, s.p) - 1) * c.w;
  }
  return 0;
}

bool bubble_formula_holds(const PipeShape& s, const PipeCosts& c) {
  return s.kind != PipeKind::ZeroBubble || (c.w <= c.f && c.w <= c.b);
}

// ---------------------------------------------------------------- simulator

namespace {

// What one rank's list has done so far for one (micro-batch, chunk).
struct PassState {
  bool recv_act = false, fwd = false, recv_grad = false, input_grad = false, weight_grad = false;
  bool split = false;  // the backward was BackwardInput, so a BackwardWeight must follow
  bool sent_act = false, sent_grad = false;
};

struct Message {
  int micro, chunk;  // the sender's
  double time;
};

class Simulator {
 public:
  Simulator(const PipeShape& s, const std::vector<std::vector<Action>>& lists, const PipeCosts& c)
      : s_(s), lists_(lists), costs_(c) {}

  PipeSim run() {
    if (static_cast<int>(lists_.size()) != s_.p)
      return fail(fmt::format("{} lists of actions for {} ranks", lists_.size(), s_.p));
    for (int r = 0; r < s_.p; ++r)
      if (!check_list(r)) return std::move(sim_);
    start();
    for (bool moved = true; moved && sim_.error.empty();) {
      moved = false;
      for (int r = 0; r < s_.p && sim_.error.empty(); ++r) moved |= advance(r);
    }
    if (!sim_.error.empty()) return std::move(sim_);
    if (!all_done()) return fail(deadlock());
    finish();
    return std::move(sim_);
  }

 private:
  PipeSim fail(std::string why) {
    sim_.ok = false;
    sim_.error = std::move(why);
    return std::move(sim_);
  }
  bool problem(int r, size_t i, const std::string& what) {
    sim_.error = fmt::format("rank {}, action {} ({}): {}", r, i, describe(lists_[r][i]), what);
    return false;
  }
  int last_stage() const { return num_stages(s_) - 1; }

  // The static pass over rank r's list: each action has what it needs.
  bool check_list(int r) {
    std::vector<PassState> st(static_cast<size_t>(s_.m) * s_.v);
    for (size_t i = 0; i < lists_[r].size(); ++i) {
      const Action& a = lists_[r][i];
      if (a.micro < 0 || a.micro >= s_.m || a.chunk < 0 || a.chunk >= s_.v)
        return problem(r, i, fmt::format("micro-batch must be in [0, {}) and chunk in [0, {})", s_.m, s_.v));
      const std::string bad = check_action(a, virtual_stage(s_, r, a.chunk), st[a.micro * s_.v + a.chunk]);
      if (!bad.empty()) return problem(r, i, bad);
    }
    return check_complete(r, st);
  }

  // Why `a` cannot come now on virtual stage `vs` given the pass so far (and records it), or "".
  std::string check_action(const Action& a, int vs, PassState& ps) const {
    if (is_compute(a.kind) && a.peer != -1) return "a compute action has peer -1";
    const bool first = vs == 0, last = vs == last_stage();
    const int prev = first ? -1 : stage_rank(s_, vs - 1), next = last ? -1 : stage_rank(s_, vs + 1);
    auto peer = [&](int want, const char* what) -> std::string {
      return a.peer == want ? "" : fmt::format("{} is rank {} (virtual stage {}), not rank {}", what, want, vs, a.peer);
    };
    switch (a.kind) {
      case ActKind::RecvAct:
        if (first) return "the first virtual stage receives no activation";
        if (ps.recv_act) return "the activation is received twice";
        ps.recv_act = true;
        return peer(prev, "the activation's sender");
      case ActKind::Forward:
        if (ps.fwd) return "a second forward";
        if (!first && !ps.recv_act) return "no activation was received before it";
        ps.fwd = true;
        return "";
      case ActKind::SendAct:
        if (last) return "the last virtual stage sends no activation";
        if (!ps.fwd) return "sent before its forward";
        if (ps.sent_act) return "the activation is sent twice";
        ps.sent_act = true;
        return peer(next, "the activation's receiver");
      case ActKind::RecvGrad:
        if (last) return "the last virtual stage receives no gradient";
        if (ps.recv_grad) return "the gradient is received twice";
        ps.recv_grad = true;
        return peer(next, "the gradient's sender");
      case ActKind::Backward:
      case ActKind::BackwardInput:
        if (!ps.fwd) return "a backward before its forward";
        if (ps.input_grad) return "a second backward";
        if (!last && !ps.recv_grad) return "no gradient was received before it";
        ps.input_grad = true;
        ps.split = a.kind == ActKind::BackwardInput;
        ps.weight_grad = !ps.split;
        return "";
      case ActKind::BackwardWeight:
        if (!ps.input_grad || !ps.split) return "a weight gradient (W) without its input gradient (Bi) before it";
        if (ps.weight_grad) return "a second weight gradient";
        ps.weight_grad = true;
        return "";
      case ActKind::SendGrad:
        if (first) return "the first virtual stage sends no gradient";
        if (!ps.input_grad) return "sent before its backward";
        if (ps.sent_grad) return "the gradient is sent twice";
        ps.sent_grad = true;
        return peer(prev, "the gradient's receiver");
    }
    return "an unknown action kind";
  }

  // Every (micro-batch, chunk) went through once each way and sent its results.
  bool check_complete(int r, const std::vector<PassState>& st) {
    for (int mb = 0; mb < s_.m; ++mb)
      for (int c = 0; c < s_.v; ++c) {
        const PassState& ps = st[mb * s_.v + c];
        const int vs = virtual_stage(s_, r, c);
        const char* missing = !ps.fwd                             ? "the forward"
                              : !ps.input_grad                    ? "the backward"
                              : !ps.weight_grad                   ? "the weight gradient (W)"
                              : vs < last_stage() && !ps.sent_act ? "the send of the activation"
                              : vs > 0 && !ps.sent_grad           ? "the send of the input gradient"
                                                                  : nullptr;
        if (missing) {
          sim_.error = fmt::format("rank {} never runs {} of micro {} chunk {}", r, missing, mb, c);
          return false;
        }
      }
    return true;
  }

  void start() {
    const size_t n = static_cast<size_t>(s_.p);
    pc_.assign(n, 0);
    clock_.assign(n, 0.0);
    in_flight_.assign(n, std::vector<int>(s_.v, 0));
    sent_.assign(n * n * 2, {});
    received_.assign(n * n * 2, 0);
    sim_.busy.assign(n, 0.0);
    sim_.max_in_flight.assign(n, std::vector<int>(s_.v, 0));
    sim_.spans.assign(n, {});
  }
  size_t channel(int from, int to, ActKind k) const { return (static_cast<size_t>(from) * s_.p + to) * 2 + !is_act(k); }

  double cost(ActKind k) const {
    const double share = 1.0 / s_.v;
    switch (k) {
      case ActKind::Forward:
        return costs_.f * share;
      case ActKind::Backward:
        return (costs_.b + costs_.w) * share;
      case ActKind::BackwardInput:
        return costs_.b * share;
      case ActKind::BackwardWeight:
        return costs_.w * share;
      default:
        return 0;
    }
  }

  // Runs rank r's actions until it finishes or waits for a message; true if it moved.
  bool advance(int r) {
    const size_t start_pc = pc_[r];
    for (; pc_[r] < lists_[r].size(); ++pc_[r]) {
      const Action& a = lists_[r][pc_[r]];
      if (is_compute(a.kind)) {
        compute(r, a);
      } else if (is_send(a.kind)) {
        sent_[channel(r, a.peer, a.kind)].push_back({a.micro, a.chunk, clock_[r]});
      } else if (!receive(r, a)) {
        break;
      }
    }
    return pc_[r] != start_pc;
  }

  void compute(int r, const Action& a) {
    const double d = cost(a.kind);
    sim_.spans[r].push_back({a, clock_[r], clock_[r] + d});
    clock_[r] += d;
    sim_.busy[r] += d;
    int& n = in_flight_[r][a.chunk];
    if (a.kind == ActKind::Forward) sim_.max_in_flight[r][a.chunk] = std::max(sim_.max_in_flight[r][a.chunk], ++n);
    if (a.kind == ActKind::Backward || a.kind == ActKind::BackwardWeight) --n;
  }

  // Matches the receive with the sender's next message on its channel; false if not sent yet (or wrong).
  bool receive(int r, const Action& a) {
    const size_t ch = channel(a.peer, r, a.kind);
    const size_t k = received_[ch];
    if (k >= sent_[ch].size()) return false;
    const Message& msg = sent_[ch][k];
    const int from = virtual_stage(s_, a.peer, msg.chunk), to = virtual_stage(s_, r, a.chunk);
    if (msg.micro != a.micro || from + (is_act(a.kind) ? 1 : -1) != to) {
      problem(r, pc_[r],
              fmt::format("message {} from rank {} of this kind is micro {} chunk {} (sends and receives of a pair "
                          "must come in the same order)",
                          k, a.peer, msg.micro, msg.chunk));
      return false;
    }
    clock_[r] = std::max(clock_[r], msg.time);
    ++received_[ch];
    return true;
  }

  bool all_done() const {
    for (int r = 0; r < s_.p; ++r)
      if (pc_[r] < lists_[r].size()) return false;
    return true;
  }

  // Each waiting rank, what it waits for, and where the sender is.
  std::string deadlock() const {
    std::string out = "deadlock:";
    for (int r = 0; r < s_.p; ++r) {
      if (pc_[r] >= lists_[r].size()) continue;
      const Action& a = lists_[r][pc_[r]];
      const int q = a.peer;
      const std::string where = pc_[q] < lists_[q].size() ? fmt::format("waits at its action {}", pc_[q]) : "finished";
      out += fmt::format(" rank {} waits at action {} ({}; rank {} sent {} of this kind to it and {});", r, pc_[r],
                         describe(a), q, sent_[channel(q, r, a.kind)].size(), where);
    }
    out.pop_back();
    return out;
  }

  void finish() {
    sim_.costs = costs_;
    sim_.makespan = *std::max_element(clock_.begin(), clock_.end());
    sim_.idle.resize(s_.p);
    for (int r = 0; r < s_.p; ++r) sim_.idle[r] = sim_.makespan - sim_.busy[r];
    sim_.ok = true;
  }

  const PipeShape& s_;
  const std::vector<std::vector<Action>>& lists_;
  PipeCosts costs_;
  PipeSim sim_;
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<std::vector<int>> in_flight_;
  std::vector<std::vector<Message>> sent_;  // per channel (from, to, act or grad), in send order
  std::vector<size_t> received_;            // per channel: how many were received
};

}  // namespace

PipeSim simulate(const PipeShape& s, const std::vector<std::vector<Action>>& lists, const PipeCosts& costs) {
  check_pipe_shape(s);
  check_costs(costs);
  return Simulator(s, lists, costs).run();
}

PipeSim simulate(const PipeShape& s, const PipeCosts& costs) {
  check_pipe_shape(s);
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < s.p; ++r) lists.push_back(pipe_actions(s, r));
  return simulate(s, lists, costs);
}

// ----------------------------------------------------------------- timeline

namespace {

// "F3", "Bi12", "W0"; with chunks "F3a" (chunk 0), or "F3:30" past 26 chunks.
std::string label(const Action& a, int v) {
  std::string s = fmt::format("{}{}", act_kind_name(a.kind), a.micro);
  if (v > 1) s += v <= 26 ? std::string(1, static_cast<char>('a' + a.chunk)) : fmt::format(":{}", a.chunk);
  return s;
}

// Per column of rank r's row, the span covering most of it (-1: idle).
std::vector<int> column_owners(const std::vector<PipeSim::Span>& spans, size_t columns, double unit) {
  std::vector<int> owner(columns, -1);
  std::vector<double> best(columns, 0.0);
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& sp = spans[i];
    const auto first = static_cast<size_t>(std::floor(sp.start / unit + 1e-9));
    const auto end = std::min(columns, static_cast<size_t>(std::ceil(sp.end / unit - 1e-9)));
    for (size_t c = first; c < end; ++c) {
      const double cover = std::min(sp.end, (c + 1) * unit) - std::max(sp.start, c * unit);
      if (cover > best[c] + 1e-12 * unit) best[c] = cover, owner[c] = static_cast<int>(i);
    }
  }
  return owner;
}

std::string row(const std::vector<PipeSim::Span>& spans, const std::vector<int>& owner, int v, size_t width) {
  std::string out;
  for (size_t c = 0; c < owner.size(); ++c) {
    std::string cell;
    if (owner[c] < 0)
      cell = ".";
    else if (c > 0 && owner[c - 1] == owner[c])
      cell = std::string(width, '-');
    else
      cell = label(spans[owner[c]].a, v);
    cell.resize(width, ' ');
    out += cell + (c + 1 < owner.size() && owner[c] >= 0 && owner[c + 1] == owner[c] ? "-" : " ");
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string legend(const PipeShape& s, const PipeSim& sim, double unit) {
  bool seen[4] = {};
  for (const auto& spans : sim.spans)
    for (const auto& sp : spans) seen[static_cast<int>(sp.a.kind)] = true;
  const char* what[] = {"forward of micro-batch 3", "its backward (input and weight gradients)",
                        "its input gradient (B)", "its weight gradient (W)"};
  std::string out = "legend:";
  for (int k = 0; k < 4; ++k)
    if (seen[k]) out += fmt::format(" {}3 {} |", act_kind_name(static_cast<ActKind>(k)), what[k]);
  if (s.v > 1) out += fmt::format(" a, b, ...: chunk 0, 1, ... (virtual stage chunk x {} + rank) |", s.p);
  return out + fmt::format(" - continues | . idle | a column is {:g} time unit{}\n", unit, unit == 1 ? "" : "s");
}

// The bubble per rank against the closed form (where it holds), and the most micro-batches in flight.
std::string summary(const PipeShape& s, const PipeSim& sim) {
  const bool holds = bubble_formula_holds(s, sim.costs);
  const double formula = bubble_formula(s, sim.costs);
  std::string out = fmt::format("\n{:>5} {:>10} {:>10} {:>7} {:>10} {:>8}  {}\n", "rank", "busy", "idle", "idle%",
                                "formula", "formula%", s.v > 1 ? "in flight per chunk" : "in flight");
  double most_idle = 0;
  for (int r = 0; r < s.p; ++r) {
    std::string flight;
    for (int n : sim.max_in_flight[r]) flight += fmt::format("{}{}", flight.empty() ? "" : ",", n);
    const std::string f = holds ? fmt::format("{:>10.4g} {:>7.1f}%", formula, 100 * formula / (sim.busy[r] + formula))
                                : fmt::format("{:>10} {:>8}", "-", "-");
    out += fmt::format("{:>5} {:>10.4g} {:>10.4g} {:>6.1f}% {}  {}\n", r, sim.busy[r], sim.idle[r],
                       100 * sim.idle_fraction(r), f, flight);
    most_idle = std::max(most_idle, sim.idle[r]);
  }
  const char* form = s.kind == PipeKind::Interleaved  ? "(p-1)(f+b+w)/V"
                     : s.kind != PipeKind::ZeroBubble ? "(p-1)(f+b+w)"
                     : s.m >= s.p                     ? "(p-1)(f+b-w)"
                                                      : "(p-1)(f+b)-(m-1)w";
  const std::string shape =
      fmt::format("(p={}, m={}, V={}, f={:g}, b={:g}, w={:g})", s.p, s.m, s.v, sim.costs.f, sim.costs.b, sim.costs.w);
  if (holds)
    return out + fmt::format("makespan {:.4g}; bubble per rank {} = {:.4g} {}\n", sim.makespan, form, formula, shape);
  return out + fmt::format(
                   "makespan {:.4g}; bubble per rank (simulated, the most idle rank's) {:.4g} {}; the closed form {} "
                   "holds only for w <= f and w <= b, so it is not shown\n",
                   sim.makespan, most_idle, shape, form);
}

}  // namespace

std::string timeline(const PipeShape& s, const PipeSim& sim, double unit) {
  PARALLM_CHECK(unit > 0 && std::isfinite(unit), ConfigError, "pipeline", "the timeline's unit must be > 0, got {}",
                unit);
  PARALLM_CHECK(sim.ok, InternalError, "pipeline", "no timeline of a failed simulation: {}", sim.error);
  const auto columns = static_cast<size_t>(std::ceil(sim.makespan / unit - 1e-9));
  size_t width = 1;
  for (const auto& spans : sim.spans)
    for (const auto& sp : spans) width = std::max(width, label(sp.a, s.v).size());
  std::string out = legend(s, sim, unit);
  for (int r = 0; r < s.p; ++r) {
    const auto owners = column_owners(sim.spans[r], columns, unit);
    out += fmt::format("rank {:<{}} {}\n", r, s.p > 10 ? 2 : 1, row(sim.spans[r], owners, s.v, width));
  }
  return out + summary(s, sim);
}

}  // namespace parallm::parallel
