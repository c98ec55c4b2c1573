#include "tuner/search_policy.h"

namespace tuneforge {

RandomPolicy::RandomPolicy(ConfigSpace space, uint64_t seed) : space_(std::move(space)), rng_(seed) {}

std::vector<Config> RandomPolicy::Propose(int n) {
  std::vector<Config> out;
  // Rejection sampling of unvisited points; give up after many misses (the space,
  // or what is left of it, is small).
  int misses = 0;
  while (static_cast<int>(out.size()) < n && misses < 2000) {
    absl::StatusOr<Config> c = space_.Sample(rng_, 1000);
    if (!c.ok() || !visited_.insert(c->ToJson()).second) {
      ++misses;
      continue;
    }
    out.push_back(*std::move(c));
  }
  return out;
}

void RandomPolicy::Observe(const std::vector<TuningRecord>& records) {
  for (const TuningRecord& r : records) {
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (c.ok()) visited_.insert(c->ToJson());
  }
}

absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               ConfigSpace space, uint64_t seed) {
  if (name.empty() || name == "random") return std::make_unique<RandomPolicy>(std::move(space), seed);
  return absl::InvalidArgumentError("unknown search policy '" + name + "' (available: random)");
}

}  // namespace tuneforge
