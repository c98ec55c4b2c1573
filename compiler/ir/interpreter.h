// A slow, obviously-correct interpreter of the loop IR. Tests use it to check
// lowering without LLVM: interpret(lower(schedule)) must equal the reference.
// Vectorised, unrolled and parallel loops run as plain serial loops.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ir/ir.h"

namespace tuneforge::ir {

// `buffers` maps every param name to its data (sized NumElements()). Out-of-bounds
// accesses are reported as errors, not undefined behaviour.
absl::Status Interpret(const LoweredFunc& func, std::map<std::string, std::vector<float>>* buffers);

}  // namespace tuneforge::ir
