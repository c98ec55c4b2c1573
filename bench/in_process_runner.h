// InProcessRunner: builds nothing, measures Artifacts in this process (bench search).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "compiler/reference/reference.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "tuner/runner.h"

namespace tuneforge::cli {

// Measures Artifacts in this process: loads the shared object, checks the output once
// against the reference, then times it like the agent does (warm-up, `number` doubled
// until a sample lasts min_repeat_ms, `repeat` samples). No sandbox: a kernel that
// crashes takes the benchmark with it, which is acceptable for a benchmark of kernels
// the test suite already checks.
class InProcessRunner : public Runner {
 public:
  InProcessRunner(const TuningTask& task, uint64_t seed) : task_(task), seed_(seed) {}

  // The task's inputs and reference output; before the first Measure.
  absl::Status Prepare(const Template& tmpl, const Target& target);

  std::vector<MeasureResult> Measure(const std::vector<MeasureInput>& inputs) override;

 private:
  MeasureResult MeasureOne(const MeasureInput& in);

  TuningTask task_;
  uint64_t seed_;
  std::vector<bool> is_output_;
  // param index -> its element type and elements (dense's W.packed)
  std::map<size_t, std::pair<runtime::ElementType, int64_t>> prepacked_sizes_;
  std::vector<HostBuffer> inputs_;
  HostBuffer expected_;
  Tolerance tolerance_;
};

}  // namespace tuneforge::cli
