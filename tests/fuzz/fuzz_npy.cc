// libFuzzer target: the .npy reader (`model run --input NAME=FILE.npy`).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/graph/executor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::vector<int64_t> shape;
  absl::StatusOr<std::vector<float>> values = tuneforge::graph::ParseNpy(bytes, "fuzz.npy", &shape);
  if (values.ok()) {
    // What parses is consistent: the shape's product is the number of values (0 when
    // a dimension is; the others may then be anything).
    int64_t n = 1;
    bool overflow = false;
    for (int64_t d : shape) overflow |= __builtin_mul_overflow(n, d, &n);
    for (int64_t d : shape) n = d == 0 ? 0 : n;
    if (n < 0 || (overflow && n != 0) || static_cast<size_t>(n) != values->size()) __builtin_trap();
  }
  return 0;
}
