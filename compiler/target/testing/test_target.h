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

// The same machine seen as an AVX2-only target (x86-64-v3): 256-bit vectors, 16
// registers. Runs natively on any x86 host with AVX2.
inline Target Avx2TestTarget() {
  Target t = Avx512TestTarget();
  t.cpu = "x86-64-v3";
  t.features = "+avx,+avx2,+fma";
  return t;
}

}  // namespace tuneforge
