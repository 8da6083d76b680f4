// Preemption signals (SIGUSR1, SIGTERM): a request to stop, not a stop. A
// scheduler about to end the job (`sbatch --signal=USR1@N`, Slurm's SIGTERM
// at the time limit or on preemption, PBS's SIGTERM before SIGKILL) asks the
// training loop to finish its step, save and exit 0 on every rank.
//
// Design: install() blocks both signals in the calling thread, so every
// thread started afterwards (MPI's, OpenMP's, CUDA's, the communication
// thread) inherits the mask and is never interrupted by them, and starts one
// "parallm-signals" thread that takes them with sigwait(). Interrupting a
// computing thread is not harmless: oneDNN's sgemm corrupted the heap when a
// handler ran on top of it (about 1 run in 15 of tests/train/run_control.sh
// aborted). That thread only counts into lock-free atomics and writes one
// line to stderr, which promises no save: a launcher aborting the job after
// one rank's error (MPI_Abort) sends the other ranks the same SIGTERM. The
// training loop polls first() once per step and turns it into a decision all
// ranks agree on (train/controls/control.h), which rank 0 logs. Further signals while
// the run saves only count: the save finishes, so a second SIGTERM cannot cut
// it in half. A handler doing the same stays installed for a thread that
// still takes the signals (one started before install()). Child processes
// must not inherit the mask: run them inside an Unblocked scope. Installed by
// the `train` command only; every other command keeps the default actions.
#pragma once

namespace parallm::stop_signal {

// Blocks SIGUSR1 and SIGTERM in this thread, starts the thread that takes
// them (once) and installs the fallback handler (again after a library, e.g.
// MPI, replaced it: calling it twice is harmless).
void install();
// Unblocks both signals in this thread for its lifetime, e.g. around popen(),
// whose child would otherwise start with SIGTERM blocked.
class Unblocked {
 public:
  Unblocked();
  ~Unblocked();
  Unblocked(const Unblocked&) = delete;
  Unblocked& operator=(const Unblocked&) = delete;

 private:
  bool was_blocked_[2];
};
// The first stop signal received (SIGUSR1 or SIGTERM), 0 while none was.
int first();
// How many were received.
int count();
// "SIGUSR1", "SIGTERM" (the signal's name).
const char* name(int sig);
// This rank is ending the job after its own error (cli's run_guarded, before
// it aborts the job): a stop signal from now on says that nothing is saved.
void ending_on_error();
// Forgets the signals received and ending_on_error() (tests).
void reset();

}  // namespace parallm::stop_signal
