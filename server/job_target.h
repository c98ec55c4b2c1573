// A job's Target comes from the agents that will measure it, not from the server's
// host (docs/architecture.md, "A job's target"): the agents report their machine
// (AgentCapabilities: triple, CPU model, CPU flags, cores) when they register; the
// job compiles for that machine.
#pragma once

#include <string>
#include <vector>

#include "compiler/target/target.h"
#include "tuneforge/v1/agent.pb.h"

namespace tuneforge {

// LLVM feature names ("avx512f", "sse4.2", "bmi") of the x86 /proc/cpuinfo flags
// that code generation cares about, sorted; flags outside the table are left out.
std::vector<std::string> LlvmFeaturesOfCpuFlags(const std::vector<std::string>& flags);

struct JobTarget {
  bool ready = false;   // false: the job waits; `waiting` says why
  Target target;        // when ready
  std::string waiting;  // when not ready, e.g. "waiting for an agent with device key 'k'"
  std::string source;   // when ready: how the target was chosen (for the job's events)
};

// The target a job of `device_key` compiles for, given the capabilities of the usable
// agents of that key (connected, not quarantined or draining) and the server's host:
//  - no agent: not ready ("waiting for an agent with device key 'K'");
//  - the agents' machine is the host's (same triple, CPU model and features): the
//    host target as LLVM detects it (exact CPU name), threads = the agents' cores;
//  - another machine: its triple, a generic CPU of its ISA level (x86-64-v4 with
//    AVX-512, v3 with AVX2+FMA, v2, x86-64) and the features its flags name,
//    threads = its cores. Agents of one key that differ are compiled for what they
//    all have (common flags, fewest cores);
//  - `requested` (JobSpec.target, may be empty) overrides fields of that target; a
//    requested triple, feature or thread count the agents do not have makes the job
//    wait, saying which.
// Agents that report no triple (simulated agents of `bench farm`) count as the host.
JobTarget ResolveJobTarget(const std::string& device_key, const std::string& requested,
                           const std::vector<v1::AgentCapabilities>& agents, const Target& host,
                           const std::string& host_cpu_model);

// "model name" of the first processor in /proc/cpuinfo text ("" if none).
std::string CpuModelOfCpuInfo(const std::string& cpuinfo);

}  // namespace tuneforge
