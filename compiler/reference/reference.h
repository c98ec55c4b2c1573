// Reference implementations: plain C++ loops, accumulating in double, that share no
// code with lowering or LLVM codegen. They define what a correct kernel computes.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/task/task.h"

namespace tuneforge {

// Allowed error of a kernel's output: |out - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// matmul and batch_matmul: float32 accumulation in any order has an error that grows
// with K; inputs are uniform in [-1, 1). atol = 4e-6 * K + 1e-5, rtol = 1e-4 (see
// docs/architecture.md).
Tolerance ToleranceFor(const TuningTask& task);

// Input buffers in entry-point order, filled with runtime::FillBuffer(seed, index).
std::vector<std::vector<float>> MakeInputs(const TuningTask& task, uint64_t seed);

// The expected output for those inputs.
absl::StatusOr<std::vector<float>> ReferenceOutput(const TuningTask& task,
                                                   const std::vector<std::vector<float>>& inputs);

}  // namespace tuneforge
