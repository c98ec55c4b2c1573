// Tasks files: one weighted task per line, parsed and checked.
#include "compiler/task/task_list.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "compiler/support/status.h"
#include "compiler/task/task.h"

namespace tuneforge {

absl::StatusOr<std::vector<ScheduledTask>> ParseTasksFile(const std::string& text) {
  std::vector<ScheduledTask> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream words(line);
    std::string word, task;
    ScheduledTask t;
    while (words >> word) {
      if (word.rfind("weight=", 0) == 0) {
        char* end = nullptr;
        std::string v = word.substr(7);
        t.weight = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !(t.weight > 0) || !std::isfinite(t.weight))
          return absl::InvalidArgumentError("tasks file line " + std::to_string(number) +
                                            ": weight must be a positive number, got '" + v + "'");
        continue;
      }
      task += (task.empty() ? "" : " ") + word;
    }
    if (task.empty())
      return absl::InvalidArgumentError("tasks file line " + std::to_string(number) + ": no task");
    t.task_text = task;
    out.push_back(t);
  }
  if (out.empty()) return absl::InvalidArgumentError("tasks file has no tasks");
  return out;
}

absl::StatusOr<std::vector<ScheduledTask>> ReadTasksFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read tasks file " + path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<ScheduledTask>> tasks = ParseTasksFile(text.str());
  if (!tasks.ok()) return absl::InvalidArgumentError(path + ": " + std::string(tasks.status().message()));
  for (ScheduledTask& t : *tasks) {
    absl::StatusOr<TuningTask> task = ParseTask(t.task_text);
    if (!task.ok()) {
      return absl::InvalidArgumentError(path + ": " + t.task_text + ": " +
                                        std::string(task.status().message()));
    }
    t.task_text = task->CanonicalText();
  }
  return tasks;
}

}  // namespace tuneforge
