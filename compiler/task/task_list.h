// Task lists: the tasks file read by `tune --tasks`, `deploy --tasks` and nightly
// specs. One task per line with an optional trailing `weight=W` (W > 0, default 1: how
// often the task runs, e.g. a layer that appears three times in a network); blank lines
// and lines starting with '#' are skipped.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge {

struct ScheduledTask {
  std::string task_text;
  double weight = 1;
};

// Splits the text into tasks and weights. Errors name the line. Tasks are not parsed.
absl::StatusOr<std::vector<ScheduledTask>> ParseTasksFile(const std::string& text);

// Reads a tasks file and validates every task (ParseTask); task_text becomes the
// canonical text. Errors start with "path:line:" or name the file.
absl::StatusOr<std::vector<ScheduledTask>> ReadTasksFile(const std::string& path);

}  // namespace tuneforge
