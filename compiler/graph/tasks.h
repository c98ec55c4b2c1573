// Task extraction (issue 17): the graph's anchor operators, with the elementwise
// epilogue each absorbs, as tuning tasks of the existing templates, identical ones
// merged with a weight (how often they run per inference). What maps to no template
// is listed as a leftover with the reason, never dropped silently.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"

namespace tuneforge::graph {

struct ExtractedTask {
  std::string task;                // canonical task text, e.g. "dense M=2 N=32 K=16 ..."
  std::string op;                  // the task's op
  int weight = 0;                  // occurrences in the graph
  double flops = 0;                // of one occurrence
  std::vector<std::string> nodes;  // the graph nodes it covers (anchor and epilogue)
  // Epilogue work of the anchor that the task's template does not take yet (runs as
  // a separate elementwise kernel), e.g. "bias+relu" after a conv2d, one entry per
  // distinct epilogue ("bias+relu | bias+residual+relu"); empty if none.
  std::string unfused_epilogue;
};

struct Leftover {
  std::string node;
  std::string op;
  std::string reason;  // why no tuning task: "elementwise", "asymmetric padding", ...
  double flops = 0;    // estimated
};

struct TaskTable {
  std::vector<ExtractedTask> tasks;  // in order of first occurrence
  std::vector<Leftover> leftovers;
  double total_flops = 0;            // tasks (times weight) and leftovers
};

absl::StatusOr<TaskTable> ExtractTasks(const Graph& graph);

}  // namespace tuneforge::graph
