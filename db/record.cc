#include "db/record.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

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

namespace {

// FNV-1a with the published 128-bit parameters (prime 2^88 + 2^8 + 0x3b). Chosen over
// the project's 64-bit FNV because content ids must stay collision-free across every
// record a team ever merges (birthday bound ~2^64 instead of ~2^32).
class Fnv128 {
 public:
  void Add(const std::string& bytes) {
    // Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
    AddRaw(absl::StrCat(bytes.size(), ":"));
    AddRaw(bytes);
  }
  std::string Hex() const {
    char out[33];
    std::snprintf(out, sizeof(out), "%016llx%016llx",
                  static_cast<unsigned long long>(static_cast<uint64_t>(h_ >> 64)),
                  static_cast<unsigned long long>(static_cast<uint64_t>(h_)));
    return out;
  }

 private:
  void AddRaw(const std::string& bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= kPrime;
    }
  }
  static constexpr unsigned __int128 kPrime = (static_cast<unsigned __int128>(1) << 88) + 0x13b;
  unsigned __int128 h_ =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
};

}  // namespace

std::string ContentId(const TuningRecord& r) {
  Fnv128 h;
  h.Add("tuneforge-record-v1");
  h.Add(r.workload.key);
  h.Add(r.target.key);
  h.Add(r.template_name);
  h.Add(std::to_string(r.template_version));
  h.Add(r.config_json);
  h.Add(r.result.environment_json);
  h.Add(std::to_string(r.result.start_unix_us));
  h.Add(std::to_string(r.result.end_unix_us));
  h.Add(r.result.agent_id);
  // %a is exact, so a cost that survives a JSON round trip hashes the same.
  std::string costs;
  char buf[64];
  for (double c : r.result.costs) {
    std::snprintf(buf, sizeof(buf), "%a,", c);
    costs += buf;
  }
  h.Add(costs);
  return h.Hex();
}

std::string ForeignContentId(const std::string& source, const std::string& raw) {
  Fnv128 h;
  h.Add("tuneforge-foreign-v1");
  h.Add(source);
  h.Add(raw);
  return h.Hex();
}

}  // namespace tuneforge
