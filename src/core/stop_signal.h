// Preemption signals (SIGUSR1, SIGTERM): a request to stop, not a stop. A
// scheduler about to end the job (`sbatch --signal=USR1@N`, Slurm's SIGTERM
// at the time limit or on preemption, PBS's SIGTERM before SIGKILL) asks the
// training loop to finish its step, save and exit 0 on every rank.
//
// Design: the handler only counts into lock-free atomics (async-signal-safe)
// and writes one line to stderr with write(2); the training loop polls
// first() once per step and turns it into a decision all ranks agree on
// (train/control.h). Further signals while the run saves only count: the
// save finishes, so a second SIGTERM cannot cut it in half. Installed by the
// `train` command only; every other command keeps the default actions.
#pragma once

namespace parallm::stop_signal {

// Installs the handlers for SIGUSR1 and SIGTERM (again after a library, e.g.
// MPI, replaced them: calling it twice is harmless).
void install();
// The first stop signal received (SIGUSR1 or SIGTERM), 0 while none was.
int first();
// How many were received.
int count();
// "SIGUSR1", "SIGTERM" (the signal's name).
const char* name(int sig);
// Forgets the signals received (tests).
void reset();

}  // namespace parallm::stop_signal
