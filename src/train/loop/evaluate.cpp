#include "train/loop/evaluate.h"

#include <algorithm>

#include "core/timer.h"
#include "train/checkpoint/state_io.h"
#include "train/loop/sample.h"

namespace parallm::train {

namespace {

// The mean loss over the global batch of train.eval_iters fixed batches of `split`.
float split_loss(Session& s, data::Split split, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  model::StepContext ctx;  // no dropout, no grads
  const int64_t passes = s.sync->passes(), Bs = s.batch() / passes, T = s.local_seq();
  s.losses.clear();
  for (int64_t k = 0; k < s.cfg.train.eval_iters; ++k) {
    s.loader->get(split, k, 0, x.data(), y.data(), /*eval=*/true);
    for (int64_t j = 0; j < passes; ++j)
      s.losses.push_back(s.forward_loss(x.data() + j * Bs * T, y.data() + j * Bs * T, Bs, T, ctx));
  }
  return s.sync->mean_loss(s.losses, s.cfg.train.eval_iters);
}

// Parameters gathered collectively (sharded) make every rank sample (the same tokens); rank 0 prints.
void sample(Session& s, int64_t it) {
  const TrainSection& t = s.cfg.train;
  if (t.sample_tokens <= 0 || !s.samples()) return;
  auto prompt = s.vocab.encode(s.prompt);
  const auto n_prompt = static_cast<std::ptrdiff_t>(prompt.size());
  const auto logits = [&s](const int32_t* tokens, int64_t T, int64_t pos, float* out) {
    s.last_logits(tokens, T, pos, out);
  };
  const SampleOptions o{
      t.sample_tokens, t.temperature, t.top_k, t.seed + static_cast<uint64_t>(it), s.vocab.size(), {}};
  // A whole model holding its own parameters samples with a KV cache; other layouts run the context each step.
  auto out = s.model->decode_supported() && s.model->params()
                 ? generate(*s.model, prompt, o)
                 : generate(s.model->config(), s.sequence_multiple(), logits, prompt, o);
  if (s.lead)
    s.progress->print("sample:\n" + s.vocab.decode(std::vector<int32_t>(out.begin() + n_prompt, out.end())) + "\n---");
}

}  // namespace

EvalResult evaluate(Session& s, int64_t it, float lr) {
  const TrainSection& t = s.cfg.train;
  Timer timer;
  std::vector<int32_t> x(s.batch() * s.local_seq()), y(s.batch() * s.local_seq());
  EvalResult r;
  r.train_loss = split_loss(s, data::Split::Train, x, y);
  r.val_loss = split_loss(s, data::Split::Val, x, y);
  const double dt = timer.seconds();
  s.progress->print(
      fmt::format("step {}: train loss {:.4f}, val loss {:.4f} ({:.1f}s)", it, r.train_loss, r.val_loss, dt));
  s.write_metrics({{"kind", "eval"},
                   {"step", it},
                   {"loss", r.train_loss},
                   {"lr", lr},
                   {"dt_ms", dt * 1e3},
                   {"dtf_ms", dt * 1e3},
                   {"dtb_ms", 0.0},
                   {"tokens_per_s", 2.0 * static_cast<double>(t.eval_iters * s.batch() * s.seq()) / dt},
                   {"mfu", 0.0},
                   {"train_loss", r.train_loss},
                   {"val_loss", r.val_loss}});
  // The last iteration saves too if nothing was saved yet: every run that trained leaves a checkpoint.
  const bool last_unsaved = it == t.max_iters && !s.saved_any;
  if (r.val_loss < s.st.best_val_loss || t.always_save_checkpoint || last_unsaved) {
    s.st.best_val_loss = std::min<double>(s.st.best_val_loss, r.val_loss);
    if (it > 0 && !t.eval_only) save_state(s, it, SaveSlot::Best, true);  // an eval-only run never rewrites it
  }
  sample(s, it);
  return r;
}

}  // namespace parallm::train
