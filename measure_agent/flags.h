// Command line of tuneforge-agent. Unknown flags and missing or malformed values are
// errors with a one-line message; nothing is read from the environment except the
// documented $TMPDIR default of --temp-dir.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/support/log.h"
#include "measure_agent/agent.h"

namespace tuneforge::agent {

struct AgentFlags {
  AgentOptions agent;
  LogLevel log_level = LogLevel::kInfo;
  bool help = false;  // --help: print AgentUsage() and exit 0
};

// Parses the arguments after the program name. Accepts `--flag value` and
// `--flag=value`.
absl::StatusOr<AgentFlags> ParseAgentFlags(const std::vector<std::string>& args);

// The --help text.
std::string AgentUsage();

}  // namespace tuneforge::agent
