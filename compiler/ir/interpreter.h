// A slow, obviously-correct interpreter of the loop IR. Tests use it to check
// lowering without LLVM: interpret(lower(schedule)) must equal the reference.
// Vectorised, unrolled and parallel loops run as plain serial loops.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ir/ir.h"

namespace tuneforge::ir {

using FloatBuffers = std::map<std::string, std::vector<float>>;
// Buffers of the quantized integer types (u8, s8, s32), each value held as an int64
// that must lie in its type's range.
using IntBuffers = std::map<std::string, std::vector<int64_t>>;

// `buffers` maps every param name to its data (sized NumElements()). Out-of-bounds
// accesses are reported as errors, not undefined behaviour.
absl::Status Interpret(const LoweredFunc& func, FloatBuffers* buffers);
// The same for a function with integer buffers: float32 params in `float_buffers`,
// u8/s8/s32 params in `int_buffers`. A read of an element of a local integer buffer
// that was never written is an error (float locals start as NaN instead).
absl::Status Interpret(const LoweredFunc& func, FloatBuffers* float_buffers,
                       IntBuffers* int_buffers);

}  // namespace tuneforge::ir
