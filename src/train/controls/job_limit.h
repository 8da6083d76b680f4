// How long the scheduler's job has left (train.max_duration=auto). Slurm
// 23.02+ exports SLURM_JOB_END_TIME (seconds since the epoch); older Slurm
// (Debian 12 ships 22.05) is asked with `squeue -h -j $SLURM_JOB_ID -o %L`.
// PBS is asked with `qstat -f $PBS_JOBID` (Resource_List.walltime minus
// resources_used.walltime). Asked once, by one rank, at start.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "comm/launch_env.h"

namespace parallm::train {

// Runs a shell command and returns its standard output ("" when it failed).
using RunCommand = std::function<std::string(const std::string& command)>;
RunCommand run_command();

// Seconds left in the job this process runs in, now (epoch seconds `now`).
// ConfigError naming train.max_duration=auto when not inside a Slurm or PBS
// job, or when the scheduler gives no limit (unlimited, or unreadable).
double job_time_left_s(const comm::EnvLookup& env, const RunCommand& run, double now);

// squeue's %L ("1-02:03:04", "02:03:04", "03:04", "45"): seconds, or nothing
// (UNLIMITED, NOT_SET, INVALID, or anything else).
std::optional<double> parse_slurm_time_left(const std::string& text);
// qstat -f's walltime limit minus the walltime used so far: seconds, or nothing.
std::optional<double> parse_pbs_time_left(const std::string& qstat_f);

}  // namespace parallm::train
