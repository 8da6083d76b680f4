// Pipeline schedules as data (Megatron's schedules.py and PyTorch's
// pipelining have this shape): a schedule is, for each pipeline rank, a list
// of actions (compute a chunk's forward, backward, backward-input or
// backward-weight for one micro-batch; send or receive an activation or a
// gradient to or from a neighbour). Each list is a pure function of (p, m, V,
// kind, rank); one executor (parallel/pipeline_runtime.h) runs any list over
// point-to-point messages of the mesh's pp group, and a simulator checks a
// schedule before it runs: every send meets its receive in the same order,
// nothing deadlocks, every micro-batch passes every chunk once in each
// direction. The simulator also measures the schedule's bubble (idle time per
// rank) for given per-action costs and prints it as a timeline, one row per
// rank, like the figures of the papers.
//
// Chunks and virtual stages: with V chunks per rank (interleaved), rank r's
// chunk c is virtual stage c * p + r (Megatron's round-robin), so the
// activation of rank p-1's chunk c goes to rank 0's chunk c+1. Without
// interleaving V = 1 and virtual stage = rank.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace parallm::parallel {

enum class PipeKind : uint8_t {
  GPipe,        // all forwards, then all backwards
  OneFOneB,     // PipeDream-flush: warm-up forwards, one forward one backward, cool-down
  Interleaved,  // Megatron's looped 1F1B over V chunks per rank
  ZeroBubble    // ZB-H1 (Qi et al. 2023): backward split into input (B) and weight (W) parts
};
const char* pipe_kind_name(PipeKind k);  // "gpipe", "1f1b", "interleaved", "zb-h1"
// From the config's spelling; ConfigError naming parallel.pp_schedule and the choices otherwise.
PipeKind parse_pipe_kind(const std::string& name);

enum class ActKind : uint8_t {
  Forward,         // F: the chunk's forward for the micro-batch (first virtual stage: from tokens)
  Backward,        // B and W together (every schedule but ZB-H1)
  BackwardInput,   // B: the input gradient only (ZB-H1)
  BackwardWeight,  // W: the weight gradients only (ZB-H1), after B of the same micro-batch and chunk
  SendAct,         // the chunk's output activation of the micro-batch to `peer` (the next virtual stage)
  RecvAct,         // the chunk's input activation from `peer` (the previous virtual stage)
  SendGrad,        // the gradient of the chunk's input to `peer` (the previous virtual stage)
  RecvGrad         // the gradient of the chunk's output from `peer` (the next virtual stage)
};
const char* act_kind_name(ActKind k);  // "F", "B", "Bi", "W", "send_act", ...

struct Action {
  ActKind kind = ActKind::Forward;
  int micro = 0;  // micro-batch, 0..m-1
  int chunk = 0;  // this rank's chunk, 0..V-1
  int peer = -1;  // pp rank of a send or receive (-1 for compute)
  bool operator==(const Action&) const = default;
};

struct PipeShape {
  int p = 1;  // pipeline ranks
  int m = 1;  // micro-batches per optimizer step
  int v = 1;  // chunks (virtual stages) per rank
  PipeKind kind = PipeKind::OneFOneB;
};

// ConfigError naming parallel.pp / optimizer.gas / parallel.pp_virtual /
// parallel.pp_schedule and the rule when a schedule cannot run this shape:
// p, m, v >= 1; v > 1 only with interleaved; interleaved needs p >= 2, v >= 2
// and m a multiple of p (Megatron's rule: its micro-batches go round in
// groups of p; other counts deadlock). GPipe, 1F1B and ZB-H1 take any m >= 1.
void check_pipe_shape(const PipeShape& s);

// Rank `rank`'s actions (a shape check_pipe_shape refuses throws its
// ConfigError; a rank outside [0, p) is an InternalError). A send sits right
// after the compute that produced its tensor; a receive right before the
// compute that needs it (the executor may post it earlier). With p = 1 there
// are no messages.
std::vector<Action> pipe_actions(const PipeShape& s, int rank);
// Forward only (evaluation, sampling): micro-batch 0 through every chunk of
// the rank in order, with its messages placed as above (any p, v; m unused).
// Rank r's list waits for virtual stage c·p + r - 1 before each chunk, so the
// micro-batch flows through every virtual stage in turn without a deadlock.
std::vector<Action> pipe_forward_actions(const PipeShape& s, int rank);

// Virtual stage of rank r's chunk c, and the rank and chunk of a virtual stage.
inline int virtual_stage(const PipeShape& s, int rank, int chunk) {
  return chunk * s.p + rank;
}
inline int stage_rank(const PipeShape& s, int stage) {
  return stage % s.p;
}
inline int stage_chunk(const PipeShape& s, int stage) {
  return stage / s.p;
}
inline int num_stages(const PipeShape& s) {
  return s.p * s.v;
}

// "F micro 3 chunk 0", "send_act micro 3 chunk 0 to rank 1": for messages and logs.
std::string describe(const Action& a);

// Costs of one micro-batch through one rank's share of the model, in any
// unit (the simulator's time unit; finite, >= 0). With V chunks a chunk is
// 1/V of the rank's layers, so each chunk's action costs 1/V of these: every
// schedule of a shape does the same work per rank. Messages cost 0.
struct PipeCosts {
  double f = 1, b = 1, w = 1;  // F, B (input part), W (weight part); Backward costs b + w
};

struct PipeSim {
  bool ok = false;
  std::string error;         // why not ok: the first deadlock, unmatched message or missing pass, in words
  double makespan = 0;       // end of the last action on any rank
  std::vector<double> busy;  // per rank: time in compute actions
  std::vector<double> idle;  // per rank: makespan - busy
  std::vector<std::vector<int>> max_in_flight;  // [rank][chunk]: most micro-batches forwarded whose weight
                                                // gradient (W, or Backward) is not done yet, at any time
  // Per rank, its compute actions with start and end times (for the timeline and tests).
  struct Span {
    Action a;
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> spans;
  PipeCosts costs;  // what it ran with
  double idle_fraction(int rank) const { return makespan > 0 ? idle[rank] / makespan : 0; }
};

// Runs every rank's list (given or pipe_actions') with the costs: an action
// starts when the previous one on its rank ended and, for a receive, when the
// matching send happened (sends never block; a receive blocks until its
// message was sent, as the executor runs them). Checks that each rank's list
// passes every micro-batch through every chunk once forward and once
// backward (Backward, or BackwardInput then BackwardWeight), after its
// forward, with the input received before the compute that needs it and the
// output sent after the compute that made it, to the neighbouring virtual
// stage; that sends and receives pair up in order per (sender, receiver,
// kind) with matching micro-batch and chunk; and that no rank waits forever.
// A list that breaks a rule gives ok = false and the first problem in
// `error` (no exception); a shape check_pipe_shape refuses, or costs that are
// negative or not finite, throw ConfigError.
PipeSim simulate(const PipeShape& s, const PipeCosts& costs = {});
PipeSim simulate(const PipeShape& s, const std::vector<std::vector<Action>>& lists, const PipeCosts& costs);

// The closed form of the idle time per rank for the shape and costs (what
// the tests compare the simulator with, equal for every rank): GPipe and
// 1F1B (p-1)(f+b+w), any m; interleaved (p-1)(f+b+w)/V; ZB-H1 (p-1)(f+b-w)
// for m >= p, and (p-1)(f+b) - (m-1)w for m < p (exact for w <= f, b).
double bubble_formula(const PipeShape& s, const PipeCosts& costs = {});
// Whether bubble_formula is the schedule's idle time: always, except ZB-H1
// with w above f or b (its closed form can then go negative).
bool bubble_formula_holds(const PipeShape& s, const PipeCosts& costs = {});

// The timeline: one row per rank, one column per `unit` of time (> 0), each
// compute action drawn from its first column as its kind and micro-batch
// ("F3", "B3", "Bi3", "W3"; with V > 1 a letter for the chunk, "F3a" for
// chunk 0), '-' where it continues, '.' idle; a column shorter than an
// action shows the action covering most of it. A legend comes first; then,
// per rank, its busy and idle time, the idle fraction beside the formula's,
// and the most micro-batches in flight.
std::string timeline(const PipeShape& s, const PipeSim& sim, double unit = 1.0);

}  // namespace parallm::parallel
