// Flags: the command line's --name value parsing and typed, range-checked getters.
#include "cli/flags.h"

#include "absl/strings/numbers.h"

namespace tuneforge::cli {

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& with_value,
                                   const std::set<std::string>& switches,
                                   const std::set<std::string>& repeatable) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      f.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      if (inline_value) return absl::InvalidArgumentError("--" + name + " takes no value");
      f.values_[name] = "1";
    } else if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--" + name + " needs a value");
        value = args[++i];
      }
      if (repeatable.count(name)) {
        f.lists_[name].push_back(value);
      } else if (f.values_.count(name)) {
        return absl::InvalidArgumentError("--" + name + " given twice");
      }
      f.values_[name] = value;
    } else {
      return absl::InvalidArgumentError("unknown option --" + name + " (see --help)");
    }
  }
  return f;
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = lists_.find(name);
  return it == lists_.end() ? std::vector<std::string>{} : it->second;
}

std::string Flags::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback, int64_t lo,
                                      int64_t hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError("--" + name + " must be an integer in " + std::to_string(lo) +
                                      ".." + std::to_string(hi) + ", got '" + it->second + "'");
  }
  return v;
}

absl::Status Flags::Require(const std::string& name) const {
  if (!Has(name)) return absl::InvalidArgumentError("missing required option --" + name);
  return absl::OkStatus();
}

}  // namespace tuneforge::cli
