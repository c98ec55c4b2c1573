// The agent machine's capabilities (CPU, ISA, caches, launcher) for Register.
#include "measure_agent/capabilities.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

#ifndef TUNEFORGE_AGENT_VERSION
#error "TUNEFORGE_AGENT_VERSION must be defined by the build"
#endif

namespace tuneforge::agent {
namespace {

std::string ReadFileOrEmpty(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// CPUs this process may run on: in a container or under taskset this is fewer than
// the machine has, and it is what a kernel's thread pool can actually use.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string KernelRelease() {
  struct utsname u;
  if (uname(&u) != 0) return "unknown";
  return u.release;
}

}  // namespace

const char* AgentVersion() { return TUNEFORGE_AGENT_VERSION; }

std::string HostTriple() {
#if defined(__x86_64__)
  return "x86_64-pc-linux-gnu";
#elif defined(__aarch64__)
  return "aarch64-unknown-linux-gnu";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64-unknown-linux-gnu";
#else
#error "unsupported agent architecture: add its LLVM triple here"
#endif
}

CpuInfo ParseCpuInfo(std::string_view text) {
  CpuInfo info;
  std::string fallback_model;  // arm kernels have no "model name" in older versions
  // This Abseil's string_view is its own type, not std::string_view.
  const absl::string_view all(text.data(), text.size());
  for (absl::string_view line : absl::StrSplit(all, '\n')) {
    if (absl::StripAsciiWhitespace(line).empty()) {
      // End of the first processor block, once it has begun.
      if (!info.model.empty() || !info.flags.empty()) break;
      continue;
    }
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "model name") {
      info.model = std::string(value);
    } else if ((key == "Hardware" || key == "CPU part" || key == "uarch") &&
               fallback_model.empty()) {
      fallback_model = std::string(value);
    } else if ((key == "flags" || key == "Features" || key == "isa") && info.flags.empty()) {
      for (absl::string_view f : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
        info.flags.emplace_back(f);
      }
    }
  }
  if (info.model.empty()) info.model = fallback_model.empty() ? "unknown" : fallback_model;
  return info;
}

tuneforge::v1::AgentCapabilities DetectCapabilities() {
  tuneforge::v1::AgentCapabilities caps;
  CpuInfo cpu = ParseCpuInfo(ReadFileOrEmpty("/proc/cpuinfo"));
  caps.set_triple(HostTriple());
  caps.set_cpu_model(cpu.model);
  for (const std::string& f : cpu.flags) caps.add_cpu_flags(f);
  caps.set_cores(UsableCores());
  caps.set_agent_version(AgentVersion());
  caps.set_hostname(Hostname());
  return caps;
}

std::string EnvironmentJson(const tuneforge::v1::AgentCapabilities& capabilities) {
  // nlohmann::json objects keep keys sorted, so the same machine always produces the
  // same string (it is compared when records from different runs are merged).
  nlohmann::json env = {
      {"cpu_model", capabilities.cpu_model()}, {"agent_version", capabilities.agent_version()},
      {"kernel_release", KernelRelease()},     {"hostname", capabilities.hostname()},
      {"triple", capabilities.triple()},       {"cores", capabilities.cores()},
  };
  return env.dump();
}

}  // namespace tuneforge::agent
