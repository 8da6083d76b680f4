// Stack dumps of every thread of the process, for hangs in the field:
// `kill -USR2 <pid>` (or a communication timeout) writes the stacks of all
// threads to one file per rank, e.g. trace-node07-3.txt, without stopping
// the process.
//
// How: install() starts a small "parallm-trace" thread. The SIGUSR2 handler
// only writes a byte to a pipe; the trace thread then signals every thread
// of the process (listed in /proc/self/task) with a real-time signal whose
// handler records its own raw return addresses with backtrace() (primed at
// install, so no allocation happens in the handler). Threads that do not
// answer within a second (signals blocked) are listed as such. Addresses are
// turned into function, file and line outside the handlers, with GCC's
// libbacktrace when the build found it (symbol tables and DWARF), else with
// dladdr. The file is written to a temporary name and renamed, so a reader
// never sees half a dump.
#pragma once
#include <string>

namespace parallm::trace {

// Installs the SIGUSR2 handler and the trace thread; dumps go to `path`.
// Calling it again changes the path only.
void install(const std::string& path);
bool installed();
// Writes the stacks of every thread, headed by `reason`, to the installed
// path and returns it ("" when not installed or the file cannot be written).
std::string dump(const std::string& reason);
// dump() the first time it is called in this process; later calls return the
// same path without writing (the first failure is the telling one).
std::string dump_once(const std::string& reason);
// The same text, returned instead of written (works without install()).
std::string capture_all(const std::string& reason);
// "libbacktrace" or "dladdr": how addresses become names.
const char* symbolizer();
// Names the calling thread as the dumps (and top, gdb) show it (15 characters kept).
void set_thread_name(const std::string& name);

}  // namespace parallm::trace
