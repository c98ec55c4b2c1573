// The machine around a measurement (docs/search.md "Clean labels"): which CPUs the
// kernel is pinned to, and how busy those CPUs are with work that is not the
// measurement. The agent waits for its CPUs to be quiet before it measures, and
// measures again (up to twice) when something else ran on them during the measurement.
//
// Busy time comes from /proc/stat's per-CPU counters (user, nice, system, irq,
// softirq and steal count as busy; idle and iowait as idle), in USER_HZ ticks: 10 ms
// each, so a 30 ms window sees three ticks per CPU. Steal counts because a VM's
// neighbour taking the host CPU slows a kernel just as a local process does.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/runtime/runtime.h"

namespace tuneforge::agent {

// "0-3,6" -> {0, 1, 2, 3, 6}: sorted, no duplicates; an error names what is wrong.
absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text);
// {0, 1, 2, 3, 6} -> "0-3,6".
std::string FormatCpuList(const std::vector<int>& cpus);
// The CPUs this thread may run on (sched_getaffinity), ascending.
using runtime::AllowedCpus;

// Busy and total ticks of a set of CPUs.
struct CpuTicks {
  int64_t busy = 0;
  int64_t total = 0;
};
// From /proc/stat's text: the sum over the "cpuN" lines of `cpus` (those absent are
// skipped).
CpuTicks ParseCpuTicks(std::string_view proc_stat, const std::vector<int>& cpus);
CpuTicks ReadCpuTicks(const std::vector<int>& cpus);  // zeros when unreadable
// Busy share of the CPUs' time between two readings; 0 when no tick passed.
double BusyFraction(const CpuTicks& before, const CpuTicks& after);

// The agent's default bound (--quiet-busy-pct 10): a parallel kernel on every CPU of
// the set is slowed by other work on any of them, and one 10 ms tick of it in a 30 ms
// window over two CPUs is already 17%.
inline constexpr double kDefaultMaxBusy = 0.10;

struct QuietOptions {
  // Wait while the CPUs are busier than this (fraction of their time, 0..1); 0: no
  // check.
  double max_busy = 0;
  int max_wait_ms = 0;   // then measure anyway (and say so)
  int window_ms = 30;    // one reading of the CPUs' business
  // After this many measurements in a row found no quiet (every wait ran out and every
  // attempt was disturbed), the load is persistent: see PersistentLoad. 0: never.
  int persistent_after = 3;
};

struct QuietCheck {
  double busy = 0;      // of the last window
  int waited_ms = 0;    // spent waiting beyond the first window
  bool quiet = true;    // the last window was at most max_busy
};

// Reads the CPUs' business over a window, then again every window while it is above
// max_busy and max_wait_ms has not passed.
QuietCheck WaitForQuiet(const std::vector<int>& cpus, const QuietOptions& options);

// Whether the CPUs' load is persistent. Waiting for quiet pays off against load that
// comes and goes (a neighbour busy 2 s of every 5); against load that stays (a build, a
// benchmark, stress-ng) every measurement waits out its bound and re-measures for
// nothing: ~3 s a measurement instead of ~0.3 s, with the same disturbed figure. After
// `persistent_after` measurements in a row that found no quiet, the sandbox measures
// once after a single reading of the CPUs (no wait, no re-measurement) and records
// that it did; the first measurement that finds the CPUs quiet, before or during it,
// ends that. Thread-safe.
class PersistentLoad {
 public:
  explicit PersistentLoad(int persistent_after) : persistent_after_(persistent_after) {}
  // True while the load is persistent: the next measurement should not wait.
  bool active() const;
  // What a measurement found: `quiet` when some reading before it, or the reading
  // during it, was within the bound. Returns +1 when this made the load persistent,
  // -1 when it ended a persistent load, 0 otherwise (for a log line).
  int Record(bool quiet);

 private:
  const int persistent_after_;
  mutable std::mutex mu_;
  int streak_ = 0;  // measurements in a row without quiet
};

// CPU seconds all threads of this process have used so far (getrusage).
double OwnCpuSeconds();

}  // namespace tuneforge::agent
