// Deterministic measurement inputs and the output comparison shared by the server's
// reference run and the agent's kernel run. Both sides must produce bit-identical
// inputs on every machine, so FillBuffer uses only integer arithmetic and exact
// float conversions.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "compiler/runtime/runtime.h"

namespace tuneforge::runtime {
namespace {

// splitmix64 finaliser: a bijective 64-bit mixer.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void FillBuffer(uint64_t seed, int buffer_index, float* data, int64_t n) {
  // Counter-based: element i depends only on (seed, buffer_index, i).
  const uint64_t stream = Mix64(Mix64(seed) ^ static_cast<uint64_t>(buffer_index));
  for (int64_t i = 0; i < n; ++i) {
    // 24 random bits k give (2k - 2^24) / 2^24, exactly representable, in [-1, 1).
    const int64_t k = static_cast<int64_t>(Mix64(stream + static_cast<uint64_t>(i)) >> 40);
    data[i] = static_cast<float>(2 * k - (int64_t{1} << 24)) * (1.0f / 16777216.0f);
  }
}

std::vector<float> FloatsFromBytes(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

int64_t FirstMismatch(const float* actual, const float* expected, int64_t n, double atol,
                      double rtol) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (std::isnan(a)) return i;
    if (a == e) continue;  // also equal infinities, whose difference is NaN
    // An infinite tolerance (rtol * inf) must not excuse a different infinity.
    if (std::isinf(a) || std::isinf(e)) return i;
    if (!(std::fabs(a - e) <= atol + rtol * std::fabs(e))) return i;
  }
  return -1;
}

}  // namespace tuneforge::runtime
