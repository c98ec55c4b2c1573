#include "db/record.h"

#include <algorithm>
#include <limits>

namespace tuneforge {

namespace {
struct KindName {
  MeasureErrorKind kind;
  const char* name;
};
// The names are stored in the db (records.error_kind) and used on the wire, so they
// are part of the file format: never rename one.
constexpr KindName kKindNames[] = {
    {MeasureErrorKind::kNone, "none"},
    {MeasureErrorKind::kInvalidConfig, "invalid_config"},
    {MeasureErrorKind::kBuildError, "build_error"},
    {MeasureErrorKind::kBuildTimeout, "build_timeout"},
    {MeasureErrorKind::kRuntimeError, "runtime_error"},
    {MeasureErrorKind::kWrongAnswer, "wrong_answer"},
    {MeasureErrorKind::kRunTimeout, "run_timeout"},
    {MeasureErrorKind::kAgentLost, "agent_lost"},
};
}  // namespace

const char* MeasureErrorKindName(MeasureErrorKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";  // only reachable through a cast of an out-of-range value
}

std::optional<MeasureErrorKind> ParseMeasureErrorKind(const std::string& name) {
  for (const KindName& k : kKindNames) {
    if (name == k.name) return k.kind;
  }
  return std::nullopt;
}

double MeasureResult::MedianCost() const {
  if (costs.empty()) return std::numeric_limits<double>::infinity();
  std::vector<double> sorted = costs;
  std::sort(sorted.begin(), sorted.end());
  size_t mid = sorted.size() / 2;
  if (sorted.size() % 2 == 1) return sorted[mid];
  return (sorted[mid - 1] + sorted[mid]) / 2;
}

}  // namespace tuneforge
