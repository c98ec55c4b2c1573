// A fixed Target for unit tests: an AVX-512 Zen 4 with 2 threads, so tests see the same
// vector width and thread count whatever machine runs them. Header-only, tests only.
#pragma once

#include "compiler/target/target.h"

namespace tuneforge {

inline Target Avx512TestTarget() {
  Target t;
  t.triple = "x86_64-pc-linux-gnu";
  t.cpu = "znver4";
  t.features = "+avx,+avx2,+avx512f,+fma";
  t.num_threads = 2;
  t.device_key = "test";
  return t;
}

}  // namespace tuneforge
