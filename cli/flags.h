// A small command-line flag parser for the tuneforge CLI: --name value and
// --switch, unknown flags and missing values are errors with one-line messages.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge::cli {

class Flags {
 public:
  // `with_value` and `switches` name the accepted flags without the leading "--".
  // A flag given twice is an error, except those in `repeatable` (a subset of
  // `with_value`), whose values GetAll returns in order.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::set<std::string>& with_value,
                                     const std::set<std::string>& switches,
                                     const std::set<std::string>& repeatable = {});
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // Integer flag within [lo, hi]; InvalidArgument names the flag.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback, int64_t lo,
                                 int64_t hi) const;
  absl::Status Require(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Every value of a repeatable flag, in the order given (empty when absent).
  std::vector<std::string> GetAll(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::vector<std::string> positional_;
};

}  // namespace tuneforge::cli
