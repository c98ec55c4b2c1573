// Runner: measures built Artifacts somewhere (agents over gRPC in the server; a
// fake in unit tests) and returns one MeasureResult per input, in order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/runtime/runtime.h"
#include "db/record.h"

namespace tuneforge {

// The measurement protocol (docs/architecture.md, "Measurement and correctness"). Defaults suit kernels of ~0.1-100 ms.
// Timeout of the untuned baseline measurement (see TuningLoop).
inline constexpr int kBaselineTimeoutMs = 120000;

struct MeasureOptions {
  int warmup = 1;
  int number = 1;
  int repeat = 3;
  int min_repeat_ms = 40;
  bool flush_cache = false;
  int timeout_ms = 10000;
  // Samples that disagree by more than max_spread ((max - min) / median) get more
  // samples, up to max_repeat in all: a noisy label costs a few samples more instead
  // of misleading the cost model (docs/search.md "Clean labels").
  int max_repeat = 7;
  double max_spread = 0.05;
};

// What a kernel's correctness is checked against; shared by all inputs of a task.
struct ExpectedOutput {
  // Elements per kernel argument, entry order (an internal buffer takes the size of
  // the artifact being measured instead: Artifact::buffer_elements).
  std::vector<int64_t> buffer_sizes;
  int output_index = 0;               // which argument is the output
  // Per argument: an internal-layout buffer (ir::BufferParam::is_internal) that the
  // kernel's prepack or body writes; neither filled as an input nor checked.
  std::vector<bool> internal;
  // Per argument: its element type (fills[i].type), and for an input how it is filled.
  std::vector<runtime::FillSpec> fills;
  uint64_t seed = 0;                  // inputs are FillBuffer(seed, argument index, fills[i])
  std::string values;                 // the reference output: little-endian elements
  // A second input set and its reference output: the agent alternates the two between
  // timed samples, so replaying an earlier output fails the check.
  uint64_t alternate_seed = 0;
  std::string alternate_values;
  double atol = 0, rtol = 0;
};

struct MeasureInput {
  std::string task_text;
  std::string config_json;
  std::shared_ptr<const Artifact> artifact;
  std::shared_ptr<const ExpectedOutput> expected;
  MeasureOptions options;
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Blocks until every input has a result. Never fails as a whole: problems are
  // per-result errors (runtime_error, run_timeout, agent_lost, ...).
  virtual std::vector<MeasureResult> Measure(const std::vector<MeasureInput>& inputs) = 0;
  // How many measurements can run at once (e.g. free agents); guides batch size.
  virtual int Parallelism() const { return 1; }
};

}  // namespace tuneforge
