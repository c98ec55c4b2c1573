// GeneticPolicy: a genetic algorithm over the ConfigSpace. The population is the best
// measured configs of the task (fitness = measured throughput, failures = 0); children
// come from tournament selection, uniform crossover knob by knob, and per-knob random
// mutation. Until `population` configs are measured it proposes random configs.
#pragma once

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tuner/search_policy.h"

namespace tuneforge {

struct GeneticOptions {
  int population = 24;         // parents are the best this many measured configs
  int tournament = 3;          // contestants per parent pick
  double mutation_rate = 0.1;  // chance that a child's knob takes a random value
  int max_tries_per_child = 50;
};

// Not thread-safe; owned by one TuningLoop.
class GeneticPolicy : public SearchPolicy {
 public:
  GeneticPolicy(const PolicyContext& context, GeneticOptions options);
  std::string name() const override { return "ga"; }
  std::vector<Config> Propose(int n) override;
  void Observe(const std::vector<TuningRecord>& records) override;

 private:
  const Config& PickParent();

  ConfigSpace space_;
  std::string workload_key_;
  GeneticOptions options_;
  std::mt19937_64 rng_;
  std::set<std::string> visited_;
  std::map<std::string, double> fitness_;  // config JSON -> best throughput seen
  std::vector<Config> parents_;            // rebuilt by Propose
};

}  // namespace tuneforge
