// CPU pinning and the quiet check around a measurement.
#include "measure_agent/quiet.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tuneforge::agent {

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  const absl::string_view all(text.data(), text.size());
  std::vector<int> cpus;
  auto bad = [&](absl::string_view part, const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU list '", all, "': '", part, "' ", why,
                     " (expected e.g. 0-3,6: CPU numbers and ranges)"));
  };
  if (absl::StripAsciiWhitespace(all).empty()) return bad(all, "is empty");
  for (absl::string_view part : absl::StrSplit(all, ',')) {
    part = absl::StripAsciiWhitespace(part);
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = 0, last = 0;
    if (!absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends.size() == 2 ? ends[1] : ends[0], &last)) {
      return bad(part, "is not a CPU number or range");
    }
    if (first < 0 || last >= CPU_SETSIZE) return bad(part, "is out of range");
    if (last < first) return bad(part, "is a descending range");
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuTicks ParseCpuTicks(std::string_view proc_stat, const std::vector<int>& cpus) {
  CpuTicks ticks;
  std::istringstream in{std::string(proc_stat)};
  std::string line;
  while (std::getline(in, line)) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; the
    // aggregate "cpu " line has no number and is skipped.
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    int64_t v[8] = {};
    fields >> cpu;
    for (int64_t& x : v) fields >> x;  // kernels before 2.6.11 have fewer: those stay 0
    if (!std::binary_search(cpus.begin(), cpus.end(), cpu)) continue;
    const int64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    ticks.busy += busy;
    ticks.total += busy + v[3] + v[4];
  }
  return ticks;
}

CpuTicks ReadCpuTicks(const std::vector<int>& cpus) {
  std::ifstream in("/proc/stat");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return ParseCpuTicks(text.str(), cpus);
}

double BusyFraction(const CpuTicks& before, const CpuTicks& after) {
  const int64_t total = after.total - before.total;
  if (total <= 0) return 0;
  return std::clamp(static_cast<double>(after.busy - before.busy) / total, 0.0, 1.0);
}

QuietCheck WaitForQuiet(const std::vector<int>& cpus, const QuietOptions& options) {
  QuietCheck check;
  if (options.max_busy <= 0 || cpus.empty()) return check;
  const auto window = std::chrono::milliseconds(std::max(1, options.window_ms));
  const auto start = std::chrono::steady_clock::now();
  CpuTicks last = ReadCpuTicks(cpus);
  for (bool first = true;; first = false) {
    std::this_thread::sleep_for(window);
    const CpuTicks now = ReadCpuTicks(cpus);
    check.busy = BusyFraction(last, now);
    last = now;
    check.quiet = check.busy <= options.max_busy;
    const auto waited = std::chrono::steady_clock::now() - start - window;
    check.waited_ms = first ? 0
                            : static_cast<int>(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(waited)
                                      .count());
    if (check.quiet || check.waited_ms >= options.max_wait_ms) return check;
  }
}

bool PersistentLoad::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return persistent_after_ > 0 && streak_ >= persistent_after_;
}

int PersistentLoad::Record(bool quiet) {
  std::lock_guard<std::mutex> lock(mu_);
  if (persistent_after_ <= 0) return 0;
  const bool was = streak_ >= persistent_after_;
  streak_ = quiet ? 0 : std::min(streak_ + 1, persistent_after_);
  const bool is = streak_ >= persistent_after_;
  return is == was ? 0 : is ? 1 : -1;
}

double OwnCpuSeconds() {
  struct rusage self;
  if (getrusage(RUSAGE_SELF, &self) != 0) return 0;
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(self.ru_utime) + seconds(self.ru_stime);
}

}  // namespace tuneforge::agent
