// Test helper: MeasureRequests for the test kernels of measure_agent/testdata, with the
// expected output computed the way the server would (C = A + B on FillBuffer inputs).
#pragma once

#include <string>

#include "tuneforge/v1/common.pb.h"

namespace tuneforge::agent::test {

// Bytes of a file; aborts the test binary if it cannot be read.
std::string ReadFileOrDie(const std::string& path);

// A request running `entry` of the shared object at `so_path` on buffers (A, B, C) of
// kTestElements floats with expected output A + B. Options: 1 warm-up, number 1,
// repeat 3, min_repeat_ms 1, timeout 5 s.
tuneforge::v1::MeasureRequest MakeKernelRequest(const std::string& so_path,
                                                const std::string& entry,
                                                const std::string& request_id);

// The same for integer buffers: A uint8 filled in [10, 20), B int8 (its default fill),
// C int32 = A + B (add_u8_s8_kernel), checked exactly.
tuneforge::v1::MeasureRequest MakeIntegerKernelRequest(const std::string& so_path,
                                                       const std::string& entry,
                                                       const std::string& request_id);

}  // namespace tuneforge::agent::test
