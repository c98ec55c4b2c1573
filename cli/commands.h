// The CLI's commands. Each returns the process exit code; errors are printed by
// main as one line "tuneforge <command>: <reason>".
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge::cli {

using CommandFn = absl::StatusOr<int> (*)(const std::vector<std::string>& args);

absl::StatusOr<int> TuneCommand(const std::vector<std::string>& args);
absl::StatusOr<int> DbCommand(const std::vector<std::string>& args);
absl::StatusOr<int> ShowCommand(const std::vector<std::string>& args);
absl::StatusOr<int> DeployCommand(const std::vector<std::string>& args);
absl::StatusOr<int> NightlyCommand(const std::vector<std::string>& args);
absl::StatusOr<int> FarmCommand(const std::vector<std::string>& args);
absl::StatusOr<int> JobsCommand(const std::vector<std::string>& args);
absl::StatusOr<int> ModelCommand(const std::vector<std::string>& args);
// `tuneforge bench ...` is declared in bench/bench.h (the benchmarks live in bench/).

}  // namespace tuneforge::cli
