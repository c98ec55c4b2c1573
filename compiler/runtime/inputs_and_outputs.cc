// Deterministic measurement inputs and the output comparison shared by the server's
// reference run and the agent's kernel run. Both sides must produce bit-identical
// inputs on every machine, so FillBuffer uses only integer arithmetic and exact
// float conversions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

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

int ElementBytes(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
    case ElementType::kInt8:
      return 1;
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
  }
  return 4;
}

const char* ElementTypeName(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kUInt8:
      return "uint8";
    case ElementType::kInt8:
      return "int8";
    case ElementType::kInt32:
      return "int32";
  }
  return "unknown";
}

bool IsKnownElementType(int value) { return value >= 0 && value <= 3; }

FillSpec DefaultFill(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return {type, -1, 1};
    case ElementType::kUInt8:
      return {type, 0, 256};
    case ElementType::kInt8:
      return {type, -128, 128};
    case ElementType::kInt32:
      return {type, -65536, 65536};
  }
  return {};
}

std::string CheckFill(const FillSpec& spec) {
  if (!IsKnownElementType(static_cast<int>(spec.type))) return "unknown element type";
  if (!std::isfinite(spec.low) || !std::isfinite(spec.high) || !(spec.low < spec.high)) {
    return "the fill range [" + std::to_string(spec.low) + ", " + std::to_string(spec.high) +
           ") is empty or not finite";
  }
  if (spec.type == ElementType::kFloat32) {
    if (std::fabs(spec.low) > 1e30 || std::fabs(spec.high) > 1e30) return "the float32 fill range is too wide";
    return "";
  }
  double lo = 0, hi = 0;
  switch (spec.type) {
    case ElementType::kUInt8:
      lo = 0, hi = 256;
      break;
    case ElementType::kInt8:
      lo = -128, hi = 128;
      break;
    default:
      lo = -2147483648.0, hi = 2147483648.0;
      break;
  }
  if (spec.low != std::floor(spec.low) || spec.high != std::floor(spec.high) || spec.low < lo ||
      spec.high > hi) {
    return std::string("the fill range of an ") + ElementTypeName(spec.type) + " buffer must be integers within [" +
           std::to_string(static_cast<int64_t>(lo)) + ", " + std::to_string(static_cast<int64_t>(hi)) + ")";
  }
  return "";
}

void FillBuffer(uint64_t seed, int buffer_index, const FillSpec& spec, void* data, int64_t n) {
  // Counter-based: element i depends only on (seed, buffer_index, i).
  const uint64_t stream = Mix64(Mix64(seed) ^ static_cast<uint64_t>(buffer_index));
  if (spec.type == ElementType::kFloat32) {
    float* out = static_cast<float*>(data);
    const double width = spec.high - spec.low;
    for (int64_t i = 0; i < n; ++i) {
      // 24 random bits k; for [-1, 1) the value (2k - 2^24) / 2^24 is exact.
      const int64_t k = static_cast<int64_t>(Mix64(stream + static_cast<uint64_t>(i)) >> 40);
      out[i] = static_cast<float>(spec.low + width * (static_cast<double>(k) * (1.0 / 16777216.0)));
    }
    return;
  }
  // Integers: the top 32 random bits scaled to the range's width (at most 2^32).
  const auto low = static_cast<int64_t>(spec.low);
  const auto width = static_cast<uint64_t>(static_cast<int64_t>(spec.high) - low);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = Mix64(stream + static_cast<uint64_t>(i)) >> 32;
    const int64_t v = low + static_cast<int64_t>((bits * width) >> 32);
    switch (spec.type) {
      case ElementType::kUInt8:
        static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v);
        break;
      case ElementType::kInt8:
        static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v);
        break;
      default:
        static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
        break;
    }
  }
}

void FillBuffer(uint64_t seed, int buffer_index, float* data, int64_t n) {
  FillBuffer(seed, buffer_index, FillSpec{}, data, n);
}

double ElementAt(ElementType type, const void* data, int64_t i) {
  switch (type) {
    case ElementType::kFloat32:
      return static_cast<const float*>(data)[i];
    case ElementType::kUInt8:
      return static_cast<const uint8_t*>(data)[i];
    case ElementType::kInt8:
      return static_cast<const int8_t*>(data)[i];
    case ElementType::kInt32:
      return static_cast<const int32_t*>(data)[i];
  }
  return 0;
}

void PoisonBuffer(ElementType type, void* data, int64_t n) {
  if (type == ElementType::kFloat32) {
    float* out = static_cast<float*>(data);
    std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN());
  } else {
    std::memset(data, 0xA5, static_cast<size_t>(n) * static_cast<size_t>(ElementBytes(type)));
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

int64_t FirstMismatch(ElementType type, const void* actual, const void* expected, int64_t n,
                      double atol, double rtol) {
  if (type == ElementType::kFloat32) {
    return FirstMismatch(static_cast<const float*>(actual), static_cast<const float*>(expected), n, atol, rtol);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double a = ElementAt(type, actual, i), e = ElementAt(type, expected, i);
    if (!(std::fabs(a - e) <= atol + rtol * std::fabs(e))) return i;
  }
  return -1;
}

}  // namespace tuneforge::runtime
