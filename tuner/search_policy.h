// SearchPolicy: proposes the next Configs to measure and learns from results.
// The foundation ships RandomPolicy; the model-based policy (XGBoost + simulated
// annealing) implements the same interface in the cost-model issue.
#pragma once

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/templates/config_space.h"
#include "db/record.h"

namespace tuneforge {

// Not thread-safe; owned by one TuningLoop.
class SearchPolicy {
 public:
  virtual ~SearchPolicy() = default;
  virtual std::string name() const = 0;
  // Up to `n` configs never proposed before (fewer when the space runs out).
  virtual std::vector<Config> Propose(int n) = 0;
  // Tells the policy about measured configs (also ones it did not propose, e.g. the
  // baseline or records loaded from the db), so it never proposes them.
  virtual void Observe(const std::vector<TuningRecord>& records) = 0;
};

// Uniform random valid configs, no repeats.
class RandomPolicy : public SearchPolicy {
 public:
  RandomPolicy(ConfigSpace space, uint64_t seed);
  std::string name() const override { return "random"; }
  std::vector<Config> Propose(int n) override;
  void Observe(const std::vector<TuningRecord>& records) override;

 private:
  ConfigSpace space_;
  std::mt19937_64 rng_;
  std::set<std::string> visited_;  // Config::ToJson of everything proposed or observed
};

// "random" (the default until the cost model lands). InvalidArgument for unknown names.
absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               ConfigSpace space, uint64_t seed);

}  // namespace tuneforge
