// Small statistics over timing samples, shared by the measurement protocol, the
// records and their readers.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

namespace tuneforge {

// Median of `v` (the mean of the middle two for an even count); +inf when empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// The nearest-rank `p` quantile of `v` (p in [0, 1]: 0.5 the upper median, 0.99 the
// p99); 0 when empty.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// Median of `v`, or `if_empty` when there are no samples.
inline double MedianOr(const std::vector<double>& v, double if_empty) { return v.empty() ? if_empty : Median(v); }

// How far apart the samples are, robust to a few outliers: the range of the samples
// without the fastest and the slowest fifth (none of fewer than five samples), over the
// median. 0 for fewer than two samples (or a median that is not positive). Unlike the
// full range it can shrink as samples are added: one stray sample stops counting
// once there are five.
inline double RelativeSpread(std::vector<double> v) {
  if (v.size() < 2) return 0;
  const double median = Median(v);
  if (!(median > 0)) return 0;
  std::sort(v.begin(), v.end());
  const size_t trim = v.size() / 5;
  return (v[v.size() - 1 - trim] - v[trim]) / median;
}

}  // namespace tuneforge
