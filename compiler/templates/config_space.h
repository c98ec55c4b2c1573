// ConfigSpace and Config. A Template defines Knobs (a name and a list of candidate
// values) and a constraint; a Config picks one value per knob. Configs are JSON
// objects with sorted keys, so equal configs have equal text (Config::ToJson), which
// is what the db stores and what "never measure a config twice" compares.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tuneforge {

struct Knob {
  Knob() = default;
  Knob(std::string name, std::vector<nlohmann::json> values, std::string doc,
       std::optional<nlohmann::json> default_value = std::nullopt)
      : name(std::move(name)),
        values(std::move(values)),
        doc(std::move(doc)),
        default_value(std::move(default_value)) {}

  std::string name;
  std::vector<nlohmann::json> values;  // ints or strings
  std::string doc;
  // Knobs added by a later template version have a default: the value that means
  // what configs without the knob (older records, hand-written configs) did. A config
  // may omit such a knob; ConfigSpace::WithDefaults fills it in.
  std::optional<nlohmann::json> default_value;
  // The values are different algorithms (different programs, e.g. direct vs Winograd
  // convolution), not parameters of one loop nest: a search explores every value
  // before it lets a cost model trained on the others rule one out (Ansor samples
  // every sketch for the same reason).
  bool structural = false;
  // The loop IR does not show the knob (a hint such as a software prefetch, which the
  // features do not count): it is a cost-model feature even where the space's other
  // knobs are not (ConfigSpace::knob_features).
  bool hidden_in_ir = false;
};

class Config {
 public:
  Config() : values_(nlohmann::json::object()) {}
  explicit Config(nlohmann::json values) : values_(std::move(values)) {}
  // Parses JSON text; only checks that it is an object (ConfigSpace::Check does the rest).
  static absl::StatusOr<Config> FromJson(const std::string& text);

  int64_t Int(const std::string& knob) const;   // TF_CHECKs presence and type
  std::string Str(const std::string& knob) const;
  // The knob's value, or `absent` when the config does not have it: a knob added later
  // with a default_value (absent = what configs without it meant), or one that only
  // some targets' spaces have (matmul's prefetch_k, pack_a).
  int64_t Int(const std::string& knob, int64_t absent) const;
  std::string Str(const std::string& knob, const std::string& absent) const;
  const nlohmann::json& values() const { return values_; }
  std::string ToJson() const { return values_.dump(); }
  bool operator==(const Config& o) const { return values_ == o.values_; }

 private:
  nlohmann::json values_;
};

class ConfigSpace {
 public:
  using Constraint = std::function<absl::Status(const Config&)>;
  ConfigSpace(std::vector<Knob> knobs, Constraint constraint);

  const std::vector<Knob>& knobs() const { return knobs_; }
  // Product of the knob sizes: every point, valid or not.
  uint64_t RawSize() const;
  // The point with this mixed-radix index (knob 0 varies fastest).
  Config At(uint64_t index) const;
  // Ok when every knob is present with one of its values, there are no unknown
  // keys and the template's constraint holds. Errors say which knob is wrong.
  // A knob with a default_value may be missing (see Knob).
  absl::Status Check(const Config& config) const;
  // The config with every missing defaulted knob set to its default.
  Config WithDefaults(const Config& config) const;
  // A uniformly random valid point (rejection sampling); NotFound if none is found
  // in `max_tries` draws.
  absl::StatusOr<Config> Sample(std::mt19937_64& rng, int max_tries = 10000) const;
  // Number of valid points: exact when RawSize() <= limit, else estimated from
  // `limit` random draws.
  uint64_t CountValid(uint64_t limit = 2000000) const;
  std::string Describe() const;  // knob table for --help / docs

  // Whether the cost model's features include one per knob next to the loop-IR
  // features (costmodel::KnobFeatures::kSpace; else only the Knob::hidden_in_ir ones).
  // A template whose kernels are one loop nest says no: its loop features already
  // describe every knob, and a model trained on a few dozen configs split on raw knob
  // values confounds a value with the bad configs it was measured in
  // (docs/features.md "Knob features"). Conv2d says yes: a Winograd kernel's loop
  // features describe one of its three stages.
  bool knob_features() const { return knob_features_; }
  void set_knob_features(bool on) { knob_features_ = on; }

 private:
  std::vector<Knob> knobs_;
  Constraint constraint_;
  bool knob_features_ = false;
};

}  // namespace tuneforge
