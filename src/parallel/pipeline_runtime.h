// Pipeline parallelism at run time: this rank's stage of the model and the
// executor of its schedule, configured by a PipelineConfig (the pipeline's
// keys, the micro-batches, the model's depth: nothing else of a run). The schedule is data
// (parallel/pipeline_schedule.h): the list of this rank's actions for (pp, optimizer.gas, pp_virtual, kind), simulated
// once at start (every send meets its receive, nothing deadlocks, every micro-batch passes every chunk both ways) and
// run here, action by action, over the mesh's pp group: compute on the model's chunk and activation set (micro-batch m
// of chunk c uses set m % in-flight(c), the simulator's count, so memory is sized at start), sends asynchronous,
// receives blocking, tag 0 for activations and 1 for gradients (MPI keeps
// their order per pair). Between the step's passes nothing here knows the
// schedule's kind.
// After a step's passes: the tied token table's gradient is summed between
// the pipeline's two ends (the first stage's embedding and the last stage's
// head), so both copies take the same update; the last stage's losses go to
// every stage, so every rank reports the same loss.
// Evaluation and sampling run forward-only over the same stages (one
// micro-batch at a time; the last stage's loss or logits broadcast).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"

namespace parallm::parallel {

struct ParallelConfig;

// What the pipeline needs of a run: its parallel.pp* keys, optimizer.gas
// (the micro-batches of a step) and model.n_layer.
struct PipelineConfig {
  int pp = 1, virtual_stages = 1;
  PipeKind kind = PipeKind::OneFOneB;
  std::vector<int64_t> layers;  // parallel.pp_layers (empty: balanced)
  int64_t gas = 1, n_layer = 1;
  static PipelineConfig of(const ParallelConfig& p, int64_t gas, int64_t n_layer);
  PipeShape shape() const;  // checked (ConfigError)
};

// Testing (PARALLM_FAULT_STOP_RANK): this rank raises `signal` halfway
// through the actions of iteration `iter` (a peer that dies or hangs mid-step).
struct MidStepFault {
  int64_t iter = -1;
  int signal = 0;
};

class Pipeline {
 public:
  // Checks and simulates the schedule for this rank's place in `mesh`
  // (InternalError naming the problem if the simulator finds one).
  Pipeline(const PipelineConfig& cfg, Mesh& mesh, MidStepFault fault = {});
  // What this rank's model holds: its chunks, activation sets per chunk, and
  // whether its backward runs in halves.
  model::PipelinePart part() const;
  // The same for pipeline rank `pp_rank` without a mesh (the planner): checks and simulates the schedule.
  static model::PipelinePart stage_part(const PipelineConfig& cfg, int pp_rank);
  const PipeShape& shape() const { return shape_; }

  // A micro-batch's input: tokens and targets (B x T, host) and its step context.
  struct Micro {
    const int32_t* x = nullptr;
    const int32_t* y = nullptr;
    model::StepContext ctx;
  };
  struct Times {
    double forward = 0, backward = 0;  // seconds in compute actions
    double span = 0;                   // from the step's first action to the end of its last compute
    // Seconds and count of each compute kind (F, B whole, B input half, W), for the mean cost of an action.
    double kind_s[4] = {0, 0, 0, 0};
    int kind_n[4] = {0, 0, 0, 0};
  };
  // One step's passes: `micro(k)` gives micro-batch k (k < optimizer.gas);
  // `losses` gets every micro-batch's loss on every rank. Gradients
  // accumulate into the model's; the tied table's are summed between the ends.
  // `it`: the iteration (MidStepFault's trigger).
  Times step(model::GPT& m, int64_t it, int64_t B, int64_t T, const std::function<Micro(int)>& micro,
             std::vector<float>& losses);
  // After step(): the gradients are final only after the last action, so the
  // gradient sync sees every unit ready at once, as after one micro-step's backward.
  void grads_final(const model::GPT& m, GradSync& sync) const;
  // Every stage's share of the pipeline's span it spent waiting (idle[stage])
  // and its mean ms per F, B, B-input and W action (cost_ms[4 * stage + kind],
  // 0 where it ran none), gathered over the pp group (collective).
  void stage_times(const Times& t, std::vector<double>& idle, std::vector<double>& cost_ms) const;
  // One optimizer step through this stage as the trainer's step adapter feeds
  // it: the gradients zeroed, the step begun on `sync`, the `gas`
  // micro-batches of B x T tokens read through `read` on the end stages (the
  // first needs tokens, the last targets; all before the first action), each
  // micro-batch's context from `context`, step(), then grads_final.
  struct StepFeed {
    int64_t it = 0, B = 0, T = 0, gas = 1;
    std::function<void(int64_t micro, int32_t* x, int32_t* y)> read;
    std::function<model::StepContext(int64_t micro)> context;
  };
  struct StepTimes {
    double forward = 0, backward = 0;               // the actions' seconds (backward with grads_final)
    double compute = 0;                             // the actions' alone
    std::vector<double> stage_idle, stage_cost_ms;  // stage_times()
  };
  StepTimes train_step(model::GPT& m, GradSync& sync, const StepFeed& feed, std::vector<float>& losses);
  // After the optimizer step: the last stage's copy of the tied table is set
  // to the first stage's (bit for bit; both took the same summed gradient,
  // but their dp reductions may have added it in different orders).
  void tied_params_from_first(model::GPT& m);
  // Forward-only over every stage: the batch's loss on every rank.
  float forward_loss(model::GPT& m, const int32_t* x, const int32_t* y, int64_t B, int64_t T,
                     const model::StepContext& ctx);
  // Forward-only: the logits of position `pos` of one sequence of T tokens, on every rank.
  void last_logits(model::GPT& m, const int32_t* tokens, int64_t T, int64_t pos, float* out);

 private:
  Mesh& mesh_;
  PipeShape shape_;
  std::vector<Action> actions_;          // this rank's, for a training step
  std::vector<Action> forward_actions_;  // for a forward-only pass (evaluation, sampling)
  model::PipelinePart part_;             // this rank's chunks, activation sets per chunk, split backward
  MidStepFault fault_;
  int64_t cur_iter_ = -1;
  std::vector<int32_t> x_, y_;  // train_step's micro-batches (end stages)
  // Runs `list` (this rank's actions); Forward of the model's last chunk stores its loss in losses[micro].
  Times execute(model::GPT& m, const std::vector<Action>& list, int64_t B, int64_t T,
                const std::function<Micro(int)>& micro, std::vector<float>* losses);
  void sum_tied_grads(model::GPT& m);
  // The last stage's `n` floats at `v`, on every rank of the pp group.
  void from_last_stage(float* v, int64_t n);
};

}  // namespace parallm::parallel
