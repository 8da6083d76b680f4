// The training loop. Setup (session.h) builds the run; each iteration may
// evaluate (evaluate.h), then takes one optimizer step (step.h), writes its
// record (run_log.h) and obeys what the ranks agreed on (control.h: save,
// stop). The loop never asks how the model is distributed:
// the gradient sync and the schedule in the session know.
#include "train/loop/trainer.h"

#include "core/error.h"
#include "core/log.h"
#include "core/profiler.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include "train/checkpoint/state_io.h"
#include "train/controls/control.h"
#include "train/controls/memory_watch.h"
#include "train/loop/evaluate.h"
#include "train/loop/step.h"
#include "train/records/run_log.h"
#include "train/session.h"

namespace parallm::train {

namespace {

bool eval_due(const TrainSection& t, int64_t it) {
  // Every eval_interval steps, and at the last iteration (train.final_eval): a run ends evaluated and checkpointed.
  return it % t.eval_interval == 0 || (it == t.max_iters && t.final_eval);
}

// A record that could not be written (a full disk) stops the run on every
// rank after iteration `it` (the ranks agreed on it in the control vote),
// once the state is saved where space allows.
[[noreturn]] void stop_on_lost_records(Session& s, int64_t it) {
  const std::string lost = s.run_dir ? s.run_dir->write_error() : std::string();
  std::string saved;
  try {
    if (s.run_dir) s.st.unwritten_records = s.run_dir->unwritten_metrics();  // written when the run resumes
    const std::string dir = save_state(s, it + 1, SaveSlot::Step);
    saved = fmt::format("the state after iteration {} is saved in {}", it, dir);
  } catch (const Error& e) {
    saved = "saving the state failed too (" + e.message() + ")";
  }
  throw IoError(
      "train", fmt::format("{}; the run stopped after iteration {} instead of training on without its "
                           "records; {}. Free space in {}, then continue with train.init_from=resume",
                           s.lead ? lost : "rank 0 could not write the run's records", it, saved, s.cfg.train.out_dir));
}

// What the ranks agreed after iteration `it` (train/controls/control.h): save a
// step-numbered checkpoint (also every train.checkpoint_interval), then
// stop or train on. Returns whether to stop; a stop's sentence goes to
// sum.stopped.
bool obey(Session& s, const ControlDecision& d, int64_t it, RunSummary& sum) {
  if (d.records_lost) stop_on_lost_records(s, it);
  const int64_t every = s.cfg.train.checkpoint_interval;  // periodic step checkpoints
  if (!d.save && !(every > 0 && (it + 1) % every == 0)) return false;
  Timer t;
  const std::string dir = save_state(s, it + 1, SaveSlot::Step, !d.stop);  // train.async_save: in the background
  s.control->saved(d, t.seconds());
  if (!d.stop) return false;
  sum.stopped = fmt::format(
      "stopped after iteration {}: {}; the state is saved in {}; continue with "
      "train.init_from=resume",
      it, d.why, dir);
  return true;
}

// A run that trained its last iteration saves the state after it
// (ckpt-<max_iters + 1>, unless that save was just made): a resume then
// finds the run finished, and a checkpoint at max_iters, saved before the
// last iteration ran, always means that iteration is still to train.
void save_final_state(Session& s, const RunSummary& sum) {
  const TrainSection& t = s.cfg.train;
  if (!sum.stopped.empty() || sum.last_iter != t.max_iters || s.st.iter == t.max_iters + 1) return;
  save_state(s, t.max_iters + 1, SaveSlot::Step);
}

// train.eval_only: one evaluation of the state the session holds (a
// checkpoint's, whatever train.max_iters says: a finished run's final state
// too), recorded at the iteration it resumes at; nothing is trained or saved.
RunSummary evaluate_only(Session& s) {
  RunSummary sum;
  sum.first_iter = sum.last_iter = s.st.iter;
  sum.last_val_loss = evaluate(s, s.st.iter, s.sched.at(s.st.iter)).val_loss;
  PARALLM_CHECK(!s.run_dir || s.run_dir->write_error().empty(), IoError, "train",
                "{}: the evaluation's record was not written", s.run_dir->write_error());
  sum.best_val_loss = static_cast<float>(s.st.best_val_loss);
  sum.loss_scale = s.scaler->state().scale;
  sum.evaluated_only = true;
  return sum;
}

RunSummary train_loop(Session& s) {
  const TrainSection& t = s.cfg.train;
  if (t.eval_only) return evaluate_only(s);
  const std::unique_ptr<Schedule> schedule = make_schedule(s);
  prepare_background_saves(s);
  RunSummary sum;
  sum.first_iter = s.st.iter;
  double tok_s_acc = 0;
  int64_t tok_s_n = 0;
  for (int64_t it = s.st.iter; it <= t.max_iters; ++it) {
    Timer t_it;
    const float lr = s.sched.at(it);
    if (eval_due(t, it)) sum.last_val_loss = evaluate(s, it, lr).val_loss;
    StepResult r = optimizer_step(s, *schedule, it, lr);
    s.faults.leak();
    r.rss_bytes = MemoryWatch::resident_bytes();
    if (const auto leak = s.memory.step(it, r.rss_bytes, s.world.rank())) log::warn("{}", *leak);
    record_step(s, it, lr, r);
    sum.train_losses.push_back(r.loss);
    sum.grad_norms.push_back(r.norm);
    if (it > sum.first_iter) {  // the first step's time includes warming up
      tok_s_acc += static_cast<double>(s.tokens_per_iter) / r.dt;
      ++tok_s_n;
    }
    if (it == sum.first_iter) report_memory(s, it);
    sum.last_iter = it;
    const bool records_ok = !s.run_dir || s.run_dir->write_error().empty();
    if (obey(s, s.control->vote(it, t_it.seconds(), records_ok), it, sum)) break;
    settle_saves(s, false);  // a background save that every rank has written stands from here
  }
  save_final_state(s, sum);
  settle_saves(s, true);
  if (prof::enabled()) log::info("profile (PARALLM_PROFILE=1):\n{}", prof::table());
  if (const std::string g = s.model->graph_summary(); !g.empty()) log::info("{}", g);
  if (!s.dev.is_cpu() && t.dtype == Precision::FP8)  // how many products FP8 tensor cores took (the rest: bf16 ones)
    log::info("FP8 tensor-core GEMMs in this run: {}", kernels::fp8_tensor_core_gemms());
  sum.best_val_loss = static_cast<float>(s.st.best_val_loss);
  sum.loss_scale = s.scaler->state().scale;
  sum.skipped_steps = s.scaler->state().skipped;
  sum.spike_skipped_steps = s.guard ? s.guard->state().skipped : 0;
  sum.mean_tokens_per_s = tok_s_n ? tok_s_acc / static_cast<double>(tok_s_n) : 0;
  return sum;
}

}  // namespace

RunSummary run_training(RunConfig cfg, comm::Communicator* world_in, int ranks_per_node, Invocation invocation) {
  std::unique_ptr<comm::Communicator> own_world;
  if (!world_in) own_world = comm::make_world("self");
  std::optional<RunDir> run_dir;
  try {
    RunSummary done;
    const std::unique_ptr<Session> s = open_session(std::move(cfg), world_in ? *world_in : *own_world, ranks_per_node,
                                                    run_dir, &done.nothing_to_do, std::move(invocation));
    return s ? train_loop(*s) : done;
  } catch (const std::exception& e) {
    if (run_dir) RunDir::log_error(e.what());  // train.log says how the run ended
    throw;
  }
}

}  // namespace parallm::train
