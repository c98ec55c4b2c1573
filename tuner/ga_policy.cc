// GeneticPolicy: a genetic algorithm over the config space.
#include "tuner/ga_policy.h"

#include <algorithm>

namespace tuneforge {

GeneticPolicy::GeneticPolicy(const PolicyContext& context, GeneticOptions options)
    : space_(context.tmpl->Space(context.task, context.target)),
      workload_key_(context.task.WorkloadKey()),
      options_(options),
      rng_(context.seed) {}

void GeneticPolicy::Observe(const std::vector<TuningRecord>& records) {
  for (const TuningRecord& r : records) {
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (!c.ok()) continue;
    // Spelled out with every defaulted knob: a record from before a knob existed is
    // the same config as one naming its default, and crossover reads every knob.
    std::string key = space_.WithDefaults(*c).ToJson();
    visited_.insert(key);
    if (r.workload.key != workload_key_) continue;
    double throughput = r.result.error == MeasureErrorKind::kNone ? 1.0 / r.result.MedianCost() : 0;
    double& f = fitness_[key];
    f = std::max(f, throughput);
  }
}

const Config& GeneticPolicy::PickParent() {
  std::uniform_int_distribution<size_t> pick(0, parents_.size() - 1);
  size_t best = pick(rng_);
  for (int i = 1; i < options_.tournament; ++i)
    best = std::min(best, pick(rng_));  // sorted best first
  return parents_[best];
}

std::vector<Config> GeneticPolicy::Propose(int n) {
  std::vector<Config> out;
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [config, f] : fitness_)
    if (f > 0) ranked.emplace_back(f, config);
  if (static_cast<int>(ranked.size()) >= std::max(2, options_.population / 2)) {
    std::sort(ranked.rbegin(), ranked.rend());
    ranked.resize(std::min<size_t>(ranked.size(), options_.population));
    parents_.clear();
    for (const auto& [f, config] : ranked) parents_.push_back(*Config::FromJson(config));
    std::uniform_real_distribution<double> u(0, 1);
    for (int child = 0; child < n; ++child) {
      for (int t = 0; t < options_.max_tries_per_child; ++t) {
        const Config& a = PickParent();
        const Config& b = PickParent();
        nlohmann::json values = nlohmann::json::object();
        for (const Knob& k : space_.knobs()) {
          if (u(rng_) < options_.mutation_rate) {
            values[k.name] =
                k.values[std::uniform_int_distribution<size_t>(0, k.values.size() - 1)(rng_)];
          } else {
            values[k.name] = (u(rng_) < 0.5 ? a : b).values().at(k.name);
          }
        }
        Config c(std::move(values));
        if (!space_.Check(c).ok() || !visited_.insert(c.ToJson()).second) continue;
        out.push_back(std::move(c));
        break;
      }
    }
  }
  // Random fill: too few measured configs yet, or the children kept colliding.
  SampleUnvisited(space_, n, &rng_, &visited_, &out);
  return out;
}

}  // namespace tuneforge
