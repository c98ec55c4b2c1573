// What this agent's machine is: the capabilities sent with Register and the
// environment fingerprint stamped on every MeasureResult (docs/architecture.md: Target,
// MeasureResult). Reads /proc and uname only; no compiler, no LLVM.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tuneforge/v1/agent.pb.h"

namespace tuneforge::agent {

// The agent's version, reported in capabilities and in every environment fingerprint.
const char* AgentVersion();

// LLVM-style triple of the machine this binary was built for, e.g.
// "x86_64-pc-linux-gnu". Decided at compile time: an agent only runs code built for
// the architecture it was itself built for.
std::string HostTriple();

struct CpuInfo {
  std::string model;               // "model name" (x86) or the best equivalent; never empty
  std::vector<std::string> flags;  // "flags" (x86) or "Features" (arm), in file order
};

// Parses the text of /proc/cpuinfo; only the first processor block is read (the
// agent assumes a homogeneous machine, as the Target does).
CpuInfo ParseCpuInfo(std::string_view text);

// Reads /proc/cpuinfo, the CPU affinity mask and the hostname of this process.
tuneforge::v1::AgentCapabilities DetectCapabilities();

// The JSON object put into MeasureResult.environment_json: cpu_model, agent_version,
// kernel_release (uname -r), hostname, triple, cores. Stable key order.
std::string EnvironmentJson(const tuneforge::v1::AgentCapabilities& capabilities);

}  // namespace tuneforge::agent
