// The one checkpoint writer (checkpoint.h): every layout's share
// (parallel/checkpoint_share.h) goes through write_checkpoint, which walks
// the share's runs for each part on every rank, streams its writer's runs into
// its file, agrees on the outcome over the world, and lets rank 0 write the
// manifest (state.json) and swap the new directory in.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/gpu.h"
#include "parallel/group_ops.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_format.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {
using ckpt::kFormat;
using ckpt::kFormatSharded;

// state.json without the format's own file list.
nlohmann::json state_json(int format, const model::ParamLayout& layout, int64_t optimizer_steps, const TrainState& st,
                          const nlohmann::json& config) {
  nlohmann::json s;
  s["format"] = format;
  s["iter"] = st.iter;
  s["best_val_loss"] = st.best_val_loss;
  s["optimizer_steps"] = optimizer_steps;
  if (st.loss_scale)
    s["loss_scale"] = {{"scale", st.loss_scale->scale},
                       {"good_steps", st.loss_scale->good_steps},
                       {"skipped", st.loss_scale->skipped}};
  if (!st.unwritten_records.empty()) s["unwritten_records"] = st.unwritten_records;
  if (!st.spike_guard.is_null()) s["spike_guard"] = st.spike_guard;
  if (!st.layout.is_null()) s["layout"] = st.layout;
  s["config"] = config;
  s["params"] = ckpt::layout_json(layout);
  s["flat_size"] = layout.total();
  return s;
}

// The message of a save that failed with `what`, once its partial <name>.tmp
// is removed (so a full disk is not kept full by it).
std::string failed_save(const CkptDir& dir, const std::string& what) {
  std::error_code removed, ec;
  fs::remove_all(dir.tmp(), removed);
  const bool have = fs::exists(fs::path(dir.path()) / "state.json", ec) || fs::exists(dir.old(), ec);
  const std::string tmp = dir.name + ".tmp";
  return fmt::format("saving the checkpoint {} failed: {}; {}; {}", dir.path(), what,
                     removed ? "the partial " + tmp + " could not be removed (" + removed.message() + "): delete it"
                             : "the partial " + tmp + " was removed",
                     have ? "the previous checkpoint is intact" : "no earlier checkpoint exists");
}

// "" where `dir`'s filesystem has `need` bytes free; else why not (the
// whole checkpoint's need where `whole`, else this rank's files').
std::string free_space_error(const fs::path& dir, int64_t need, bool whole) {
  std::error_code ec;
  const fs::space_info sp = fs::space(dir, ec);
  if (ec || static_cast<uintmax_t>(need) <= sp.available) return "";
  return fmt::format(
      "not enough free space: the checkpoint needs {} bytes ({:.1f} MiB){} and {} has {} bytes ({:.1f} MiB) free; "
      "nothing was written",
      need, static_cast<double>(need) / (1 << 20), whole ? " in all" : " on this rank", dir.parent_path().string(),
      sp.available, static_cast<double>(sp.available) / (1 << 20));
}

// What a failed step of a save says: a parallm error without its [where].
std::string reason(const std::exception& e) {
  const auto* pe = dynamic_cast<const Error*>(&e);
  return pe ? pe->message() : e.what();
}

// Whether every rank of `world` managed its part of a save (`err` empty): if
// not, every rank throws naming the first rank that failed and its reason,
// and rank 0 removes the partial <name>.tmp.
void agree_saved(comm::Communicator& world, const CkptDir& dir, std::string err) {
  const int n = world.size();
  int first = err.empty() ? n : world.rank();
  if (n > 1) {
    Tensor t = Tensor::empty({1}, DType::I32);
    t.data<int32_t>()[0] = first;
    world.all_reduce(t, comm::ReduceOp::Min);
    first = t.data<int32_t>()[0];
    if (first < n) {
      parallel::broadcast_text(world, err, first);
      err = fmt::format("{} (on rank {})", err, first);
    }
  }
  if (first == n) return;
  if (world.rank() != 0) throw IoError("checkpoint.save", err + "; rank 0 removes the partial checkpoint");
  throw IoError("checkpoint.save", failed_save(dir, err));
}

// Runs `step`, returning what it threw as a failed step's text ("" if nothing).
template <class F>
std::string attempt(const std::string& what, F&& step) {
  try {
    step();
    return "";
  } catch (const std::exception& e) {
    return what + ": " + reason(e);
  }
}

std::string shard_file(int r, int n) {
  return fmt::format("shard-{:05d}-of-{:05d}.bin", r, n);
}

// Writes state.json into the finished tmp directory, then swaps it in:
// <name> -> <name>.old, <name>.tmp -> <name>, drop <name>.old.
void finish_and_swap(const CkptDir& dir, const nlohmann::json& state) {
  const fs::path final_dir = dir.path(), tmp_dir = dir.tmp(), old_dir = dir.old();
  nlohmann::json s = state;
  s["state_crc32"] = ckpt::state_crc(s);
  const std::string js = s.dump(1);
  write_file((tmp_dir / "state.json").string(), {{js.data(), js.size()}});
  fs::remove_all(old_dir);
  if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
  fs::rename(tmp_dir, final_dir);
  fs::remove_all(old_dir);
}

}  // namespace

// A writer's files: one shard file, or (whole files) model.bin for the
// parameters and optim.bin for the moments; a CRC-32 each. A failure stops
// the writing, not the rank's part in the share's collectives.
struct WriterFiles {  // not file-local: StagedCheckpoint::Files holds one
  std::vector<std::string> names;
  std::unique_ptr<FileWriter> file;
  int at = -1;  // the open file's index
  uint32_t crc[2] = {0, 0};
  std::string err;

  void open(const fs::path& tmp_dir, int index) {
    if (!err.empty() || index == at) return;
    finish();
    if (!err.empty()) return;
    at = index;
    err = attempt("writing " + names[static_cast<size_t>(index)],
                  [&] { file = std::make_unique<FileWriter>((tmp_dir / names[static_cast<size_t>(index)]).string()); });
  }
  void append(const float* data, int64_t count) {
    if (!file) return;
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    err = attempt("writing " + names[static_cast<size_t>(at)], [&] { file->append(data, bytes); });
    crc[at] = crc32_update(crc[at], data, bytes);
    if (!err.empty()) file.reset();
  }
  void finish() {
    if (file) err = attempt("writing " + names[static_cast<size_t>(at)], [&] { file->finish(); });
    file.reset();
  }
  // A run's data missing on its writer (a share's bug): the save fails on every rank, agreed.
  void missing(size_t k) {
    if (err.empty()) err = fmt::format("internal error: the writer of run {} has no data for it", k);
    file.reset();
  }
};

namespace {

// state.json for a share (rank 0): the files and checksums of every writer
// (`crcs`: per writer, two words), and for shard files which runs each holds.
nlohmann::json manifest(const parallel::CheckpointShare& share, const model::ParamLayout& whole,
                        const std::vector<uint32_t>& crcs, int64_t optimizer_steps, const TrainState& st,
                        const nlohmann::json& config) {
  if (share.whole_files) {
    nlohmann::json s = state_json(kFormat, whole, optimizer_steps, st, config);
    const auto pbytes = static_cast<size_t>(whole.total()) * sizeof(float);
    s["files"] = {{"model.bin", pbytes}, {"optim.bin", 2 * pbytes}};
    s["checksums"] = {{"model.bin", crc32_hex(crcs[0])}, {"optim.bin", crc32_hex(crcs[1])}};
    return s;
  }
  nlohmann::json s = state_json(kFormatSharded, whole, optimizer_steps, st, config);
  s["world"] = share.writers;
  s["shards"] = nlohmann::json::array();
  std::vector<nlohmann::json> pieces(static_cast<size_t>(share.writers), nlohmann::json::array());
  std::vector<int64_t> sizes(static_cast<size_t>(share.writers), 0);
  for (const auto& r : share.runs) {  // each writer's runs in order, at their offsets in its file
    const auto w = static_cast<size_t>(r.writer);
    pieces[w].push_back({r.flat, r.count, sizes[w]});
    sizes[w] += r.count;
  }
  for (int w = 0; w < share.writers; ++w) {
    const int64_t size = sizes[static_cast<size_t>(w)];
    s["shards"].push_back({{"file", shard_file(w, share.writers)},
                           {"shard_size", size},
                           {"crc32", crc32_hex(crcs[2 * static_cast<size_t>(w)])},
                           {"pieces", pieces[static_cast<size_t>(w)]}});
  }
  return s;
}

// Every rank's writer index and checksums (three words each), on every rank.
Tensor gather_crcs(comm::Communicator& world, const parallel::CheckpointShare& share, const WriterFiles& f) {
  const int n = world.size();
  Tensor mine = Tensor::empty({3}, DType::I32), all = Tensor::empty({3 * n}, DType::I32);
  mine.data<int32_t>()[0] = share.writer;
  std::memcpy(mine.data<int32_t>() + 1, f.crc, sizeof(f.crc));
  if (n > 1) {
    world.all_gather(mine, all);
  } else {
    std::memcpy(all.raw(), mine.raw(), 3 * sizeof(int32_t));
  }
  return all;
}

// The checksums by writer (two words each) from gather_crcs (rank 0, inside
// the manifest's attempt); InternalError unless each writer index is claimed
// by exactly one rank.
std::vector<uint32_t> writer_crcs(const Tensor& all, int n, const parallel::CheckpointShare& share) {
  std::vector<uint32_t> crcs(2 * static_cast<size_t>(share.writers));
  std::vector<int> claimed(static_cast<size_t>(share.writers), 0);
  for (int r = 0; r < n; ++r) {
    const int w = all.data<int32_t>()[3 * r];
    if (w < 0) continue;
    PARALLM_CHECK(w < share.writers && ++claimed[static_cast<size_t>(w)] == 1, InternalError, "checkpoint.save",
                  "writer {} of {} claimed twice", w, share.writers);
    std::memcpy(&crcs[2 * static_cast<size_t>(w)], all.data<int32_t>() + 3 * r + 1, 2 * sizeof(uint32_t));
  }
  for (int w = 0; w < share.writers; ++w)
    PARALLM_CHECK(claimed[static_cast<size_t>(w)] == 1, InternalError, "checkpoint.save",
                  "the checkpoint's file {} of {} has no writer", w, share.writers);
  return crcs;
}
}  // namespace

namespace {
// The tmp directory made by rank 0 with room for the save, agreed: each writer checks its own bytes, rank 0 the
// whole checkpoint's (a shared filesystem holds them all), before anything is written.
void open_save(comm::Communicator& world, const CkptDir& dir, const parallel::CheckpointShare& share) {
  const fs::path tmp_dir = dir.tmp();
  agree_saved(world, dir, world.rank() != 0 ? "" : attempt("creating " + tmp_dir.string(), [&] {
                fs::remove_all(tmp_dir);
                fs::create_directories(tmp_dir);
              }));
  int64_t mine = 0, all = 0;
  for (const auto& r : share.runs) {
    all += 3 * r.count;
    if (r.writer == share.writer) mine += 3 * r.count;
  }
  const int64_t need = static_cast<int64_t>(sizeof(float)) * (world.rank() == 0 ? all : mine);
  agree_saved(world, dir, need == 0 ? "" : free_space_error(tmp_dir, need, world.rank() == 0 && share.writers > 1));
}

// Every run of this rank's share, in file order: emit(file index, data, count) for its own, and the share's
// collectives on every rank.
template <class Emit>
void walk_share(const parallel::CheckpointShare& share, WriterFiles& f, Emit&& emit) {
  for (auto part : {parallel::StatePart::Params, parallel::StatePart::M, parallel::StatePart::V})
    for (size_t k = 0; k < share.runs.size(); ++k) {
      const float* d = share.data(part, k);  // on every rank: a share may communicate in it
      if (share.runs[k].writer != share.writer || share.runs[k].count == 0) continue;
      if (!d) f.missing(k);
      emit(share.whole_files && part != parallel::StatePart::Params ? 1 : 0, d, share.runs[k].count);
    }
}

// The save's end, collective: every writer's outcome agreed, the checksums gathered, rank 0's manifest and swap.
void close_save(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& whole,
                const parallel::CheckpointShare& share, WriterFiles& f, int64_t optimizer_steps, const TrainState& st,
                const nlohmann::json& config) {
  agree_saved(world, dir, f.err);
  const Tensor all = gather_crcs(world, share, f);
  agree_saved(world, dir, world.rank() != 0 ? "" : attempt("writing the manifest", [&] {
                finish_and_swap(
                    dir, manifest(share, whole, writer_crcs(all, world.size(), share), optimizer_steps, st, config));
              }));
}

std::vector<std::string> file_names(const parallel::CheckpointShare& share) {
  return share.whole_files ? std::vector<std::string>{"model.bin", "optim.bin"}
                           : std::vector<std::string>{shard_file(share.writer, share.writers)};
}
}  // namespace

void write_checkpoint(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& whole,
                      const parallel::CheckpointShare& share, int64_t optimizer_steps, const TrainState& st,
                      const nlohmann::json& config) {
  PARALLM_CHECK(!share.whole_files || (share.writers == 1 && share.runs.size() == 1), InternalError, "checkpoint.save",
                "whole files come from one writer holding one run");
  open_save(world, dir, share);
  WriterFiles f;
  f.names = file_names(share);
  if (share.writer >= 0) f.open(dir.tmp(), 0);  // a writer's file exists even when it holds no run
  walk_share(share, f, [&](int file, const float* d, int64_t count) {
    f.open(dir.tmp(), file);
    f.append(d, count);
  });
  f.finish();
  close_save(world, dir, whole, share, f, optimizer_steps, st, config);
}

struct StagedCheckpoint::Files {
  WriterFiles f;
  std::vector<std::vector<float>> data;  // per file
};

StagedCheckpoint::StagedCheckpoint() = default;
StagedCheckpoint::~StagedCheckpoint() = default;
StagedCheckpoint::StagedCheckpoint(StagedCheckpoint&&) noexcept = default;
StagedCheckpoint& StagedCheckpoint::operator=(StagedCheckpoint&&) noexcept = default;

StagedCheckpoint stage_checkpoint(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& whole,
                                  const parallel::CheckpointShare& share, int64_t optimizer_steps, const TrainState& st,
                                  const nlohmann::json& config, StagingBuffers buffers) {
  PARALLM_CHECK(!share.whole_files || (share.writers == 1 && share.runs.size() == 1), InternalError, "checkpoint.save",
                "whole files come from one writer holding one run");
  open_save(world, dir, share);
  StagedCheckpoint c;
  c.dir = dir;
  c.whole = whole;
  c.share = share;
  c.share.data = nullptr;  // staged: its buffers are not read again
  c.share.keep.reset();
  c.optimizer_steps = optimizer_steps;
  c.st = st;
  c.config = config;
  c.pause_ms = env::integer(env::Var::FaultSlowSave, 0, 3600000);  // testing: PARALLM_FAULT_SLOW_SAVE
  c.files = std::make_unique<StagedCheckpoint::Files>();
  c.files->f.names = file_names(share);
  c.files->data = std::move(buffers);
  c.files->data.resize(c.files->f.names.size());
  for (auto& v : c.files->data) v.clear();  // capacity kept: a reused buffer's pages are already mapped
  walk_share(share, c.files->f, [&](int file, const float* d, int64_t count) {
    auto& v = c.files->data[static_cast<size_t>(file)];
    if (d) v.insert(v.end(), d, d + count);
  });
  return c;
}

namespace {
void write_files(StagedCheckpoint& c) {
  WriterFiles& f = c.files->f;
  for (size_t i = 0; i < c.files->data.size(); ++i) {
    f.open(c.dir.tmp(), static_cast<int>(i));
    const auto& v = c.files->data[i];
    constexpr size_t kChunk = size_t{1} << 22;  // 16 MiB a write: PARALLM_FAULT_SLOW_SAVE's unit
    for (size_t at = 0; at < v.size(); at += kChunk) {
      f.append(v.data() + at, static_cast<int64_t>(std::min(kChunk, v.size() - at)));
      if (c.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.pause_ms));
    }
  }
  f.finish();
}
}  // namespace

void write_staged(StagedCheckpoint& c) {
  WriterFiles& f = c.files->f;
  if (c.share.writer >= 0) {
    const std::string e = attempt("writing in the background", [&] { write_files(c); });  // nothing leaves the thread
    if (f.err.empty()) f.err = e;
  }
}

StagingBuffers staging_for(const parallel::CheckpointShare& share) {
  StagingBuffers b(share.writer < 0 ? 0 : file_names(share).size());
  std::vector<int64_t> n(b.size(), 0);
  for (const auto& r : share.runs)
    if (r.writer == share.writer && share.writer >= 0) {
      n[0] += r.count;
      n[share.whole_files ? 1 : 0] += 2 * r.count;  // m and v: optim.bin, or the same shard file
    }
  for (size_t i = 0; i < b.size(); ++i) {
    b[i].resize(static_cast<size_t>(n[i]));  // zeroed: every page touched once, here
    b[i].clear();
  }
  return b;
}

StagingBuffers take_buffers(StagedCheckpoint& c) {
  return c.files ? std::move(c.files->data) : StagingBuffers{};
}

void finish_staged(comm::Communicator& world, StagedCheckpoint& c) {
  close_save(world, c.dir, c.whole, c.share, c.files->f, c.optimizer_steps, c.st, c.config);
}

void save_checkpoint(const CkptDir& dir, const model::ParamLayout& layout, const float* p, const float* om,
                     const float* ov, int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config) {
  auto self = comm::make_world("self");
  write_checkpoint(*self, dir, layout, parallel::whole_on_one(true, {p, om, ov}, layout.total()), optimizer_steps, st,
                   config);
}

parallel::StateBuffers host_state(const model::GPT& m, const optim::AdamW& opt, std::vector<float>& host) {
  if (m.device().is_cpu()) return {m.params(), opt.m(), opt.v()};
  const auto n = static_cast<size_t>(m.flat_size());
  host.resize(3 * n);
  m.store_params(host.data());
  gpu::memcpy_d2h(host.data() + n, opt.m(), n * sizeof(float));
  gpu::memcpy_d2h(host.data() + 2 * n, opt.v(), n * sizeof(float));
  return {host.data(), host.data() + n, host.data() + 2 * n};
}

void save_checkpoint(const CkptDir& dir, const model::GPT& m, const optim::AdamW& opt, const TrainState& st,
                     const nlohmann::json& config) {
  PARALLM_CHECK(m.layout().whole(), InternalError, "checkpoint.save",
                "a model part is saved by its layout's share (write_checkpoint)");
  std::vector<float> host;
  const parallel::StateBuffers b = host_state(m, opt, host);
  save_checkpoint(dir, m.layout(), b.params, b.m, b.v, opt.steps_taken(), st, config);
}

}  // namespace parallm::train
