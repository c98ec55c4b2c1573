// Template unit tests: run a lowered function in the interpreter on given inputs.
// Header-only, tests only.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/ir.h"

namespace tuneforge {

// Binds `inputs` to the function's input parameters in order; outputs and internal
// (prepacked) buffers start as NaN so an element the function never writes shows up.
// Returns every buffer by name after the run.
inline absl::StatusOr<std::map<std::string, std::vector<float>>> InterpretOnInputs(
    const ir::LoweredFunc& f, const std::vector<std::vector<float>>& inputs) {
  std::map<std::string, std::vector<float>> buffers;
  size_t next = 0;
  for (const ir::BufferParam& p : f.params) {
    if (p.is_output || p.is_internal) {
      buffers[p.name] = std::vector<float>(p.NumElements(), std::nanf(""));
    } else {
      if (next == inputs.size()) return absl::InvalidArgumentError("too few inputs");
      buffers[p.name] = inputs[next++];
    }
  }
  if (next != inputs.size()) return absl::InvalidArgumentError("too many inputs");
  absl::Status st = ir::Interpret(f, &buffers);
  if (!st.ok()) return st;
  return buffers;
}

// What the cost model lowers (Template::InstantiateKernel) has the body and params of
// `full` (Instantiate's function); `what` names the config in a failure.
inline void ExpectSameKernel(const ir::LoweredFunc& kernel, const ir::LoweredFunc& full,
                             const std::string& what) {
  EXPECT_EQ(ir::ToString(kernel.body), ir::ToString(full.body)) << what;
  ASSERT_EQ(kernel.params.size(), full.params.size()) << what;
  for (size_t p = 0; p < full.params.size(); ++p) {
    EXPECT_EQ(kernel.params[p].name, full.params[p].name) << what;
    EXPECT_EQ(kernel.params[p].shape, full.params[p].shape) << what;
  }
}

}  // namespace tuneforge
