// ConfigSpace and Config: knobs, JSON, validity checks and sampling.
#include "compiler/templates/config_space.h"

#include <sstream>

#include "compiler/support/status.h"

namespace tuneforge {

absl::StatusOr<Config> Config::FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config is not valid JSON: " + text);
  if (!j.is_object()) return absl::InvalidArgumentError("config must be a JSON object: " + text);
  return Config(std::move(j));
}

int64_t Config::Int(const std::string& knob) const {
  auto it = values_.find(knob);
  TF_CHECK(it != values_.end() && it->is_number_integer(), "config has no integer knob ", knob);
  return it->get<int64_t>();
}

int64_t Config::Int(const std::string& knob, int64_t absent) const {
  return values_.contains(knob) ? Int(knob) : absent;
}

std::string Config::Str(const std::string& knob, const std::string& absent) const {
  return values_.contains(knob) ? Str(knob) : absent;
}

std::string Config::Str(const std::string& knob) const {
  auto it = values_.find(knob);
  TF_CHECK(it != values_.end() && it->is_string(), "config has no string knob ", knob);
  return it->get<std::string>();
}

ConfigSpace::ConfigSpace(std::vector<Knob> knobs, Constraint constraint)
    : knobs_(std::move(knobs)), constraint_(std::move(constraint)) {
  for (const Knob& k : knobs_) TF_CHECK(!k.values.empty(), "knob ", k.name, " has no values");
}

uint64_t ConfigSpace::RawSize() const {
  uint64_t n = 1;
  for (const Knob& k : knobs_) n *= k.values.size();
  return n;
}

Config ConfigSpace::At(uint64_t index) const {
  nlohmann::json j = nlohmann::json::object();
  for (const Knob& k : knobs_) {
    j[k.name] = k.values[index % k.values.size()];
    index /= k.values.size();
  }
  return Config(std::move(j));
}

absl::Status ConfigSpace::Check(const Config& config) const {
  const nlohmann::json& j = config.values();
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const Knob& k : knobs_) known |= (k.name == it.key());
    if (!known) return absl::InvalidArgumentError("unknown knob '" + it.key() + "'");
  }
  bool complete = true;  // no default to fill in
  for (const Knob& k : knobs_) {
    auto it = j.find(k.name);
    if (it == j.end()) {
      complete = false;
      if (k.default_value) continue;
      return absl::InvalidArgumentError("missing knob '" + k.name + "'");
    }
    bool allowed = false;
    for (const nlohmann::json& v : k.values) allowed |= (v == *it);
    if (!allowed) {
      nlohmann::json choices = k.values;
      return absl::InvalidArgumentError("knob '" + k.name + "' = " + it->dump() +
                                        " is not one of " + choices.dump());
    }
  }
  if (!constraint_) return absl::OkStatus();
  // A config with every knob (a sampled or mutated one: the search checks thousands a
  // second) is checked as it is, not copied.
  return complete ? constraint_(config) : constraint_(WithDefaults(config));
}

Config ConfigSpace::WithDefaults(const Config& config) const {
  nlohmann::json j = config.values();
  for (const Knob& k : knobs_)
    if (k.default_value && !j.contains(k.name)) j[k.name] = *k.default_value;
  return Config(std::move(j));
}

absl::StatusOr<Config> ConfigSpace::Sample(std::mt19937_64& rng, int max_tries) const {
  for (int t = 0; t < max_tries; ++t) {
    Config c = At(std::uniform_int_distribution<uint64_t>(0, RawSize() - 1)(rng));
    if (Check(c).ok()) return c;
  }
  return absl::NotFoundError("no valid config found in " + std::to_string(max_tries) + " draws");
}

uint64_t ConfigSpace::CountValid(uint64_t limit) const {
  uint64_t raw = RawSize();
  if (raw <= limit) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < raw; ++i) n += Check(At(i)).ok();
    return n;
  }
  std::mt19937_64 rng(42);
  uint64_t hits = 0;
  for (uint64_t t = 0; t < limit; ++t)
    hits += Check(At(std::uniform_int_distribution<uint64_t>(0, raw - 1)(rng))).ok();
  return static_cast<uint64_t>(static_cast<double>(raw) * hits / limit);
}

std::string ConfigSpace::Describe() const {
  std::ostringstream os;
  for (const Knob& k : knobs_) {
    nlohmann::json values = k.values;
    os << "  " << k.name << " " << values.dump() << "  " << k.doc << "\n";
  }
  return os.str();
}

}  // namespace tuneforge
