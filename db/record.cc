// TuningRecord and its content id (128-bit FNV over the canonical fields).
#include "db/record.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "compiler/support/stats.h"

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

double MeasureResult::MedianCost() const { return Median(costs); }

namespace {

// FNV-1a with the published 128-bit parameters (prime 2^88 + 2^8 + 0x3b). Chosen over
// the project's 64-bit FNV because content ids must stay collision-free across every
// record a team ever merges (birthday bound ~2^64 instead of ~2^32).
class Fnv128 {
 public:
  void Add(std::string_view bytes) {
    // Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
    char len[24];
    std::to_chars_result r = std::to_chars(len, len + sizeof(len) - 1, bytes.size());
    *r.ptr++ = ':';
    AddRaw(std::string_view(len, static_cast<size_t>(r.ptr - len)));
    AddRaw(bytes);
  }
  void Add(int64_t n) {
    char buf[24];
    std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), n);
    Add(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  }
  std::string Hex() const {
    char out[33];
    std::snprintf(out, sizeof(out), "%016llx%016llx",
                  static_cast<unsigned long long>(static_cast<uint64_t>(h_ >> 64)),
                  static_cast<unsigned long long>(static_cast<uint64_t>(h_)));
    return out;
  }

 private:
  void AddRaw(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      // h * prime with prime = 2^88 + 0x13b, as a shift and a small multiply (mod 2^128):
      // the same product without a full 128x128-bit multiply.
      h_ = (h_ << 88) + h_ * 0x13b;
    }
  }
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
  h.Add(int64_t{r.template_version});
  h.Add(r.config_json);
  h.Add(r.result.environment_json);
  h.Add(int64_t{r.result.start_unix_us});
  h.Add(int64_t{r.result.end_unix_us});
  h.Add(r.result.agent_id);
  // printf's %a is exact, so a cost that survives a JSON round trip hashes the same.
  // std::to_chars(hex) prints the same digits as glibc's %a for normal numbers (minus
  // the "0x") and is several times faster; zero and subnormals keep snprintf.
  std::string costs;
  char buf[64];
  for (double c : r.result.costs) {
    if (std::isnormal(c)) {
      buf[0] = c < 0 ? '-' : '0';
      char* p = buf + 1;
      if (c < 0) *p++ = '0';
      *p++ = 'x';
      std::to_chars_result end = std::to_chars(p, buf + sizeof(buf) - 1, std::fabs(c),
                                               std::chars_format::hex);
      *end.ptr = ',';
      costs.append(buf, static_cast<size_t>(end.ptr + 1 - buf));
    } else {
      std::snprintf(buf, sizeof(buf), "%a,", c);
      costs += buf;
    }
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
