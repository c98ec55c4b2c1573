// Search policies by name: model, random, grid, ga.
#include "tuner/search_policy.h"

#include <numeric>

#include "tuner/ga_policy.h"
#include "tuner/model_policy.h"

namespace tuneforge {

void SampleUnvisited(const ConfigSpace& space, int n, std::mt19937_64* rng,
                     std::set<std::string>* visited, std::vector<Config>* out) {
  // Rejection sampling; give up after many misses (the space, or what is left of it,
  // is small).
  int misses = 0;
  while (static_cast<int>(out->size()) < n && misses < 2000) {
    absl::StatusOr<Config> c = space.Sample(*rng, 1000);
    if (!c.ok() || !visited->insert(c->ToJson()).second) {
      ++misses;
      continue;
    }
    out->push_back(*std::move(c));
  }
}

int KnobDistance(const ConfigSpace& space, const Config& a, const Config& b) {
  int d = 0;
  for (const Knob& k : space.knobs())
    d += a.values().value(k.name, nlohmann::json()) != b.values().value(k.name, nlohmann::json());
  return d;
}

std::optional<size_t> DiversePicker::Next(const std::vector<const Config*>& ranked,
                                          const std::vector<Config>& batch,
                                          const std::function<bool(size_t)>& taken) {
  while (next_ranked_ < ranked.size()) {
    const size_t i = next_ranked_++;
    if (taken(i)) continue;
    bool near = false;
    for (const Config& b : batch) near |= KnobDistance(space_, *ranked[i], b) < min_distance_;
    if (!near) return i;
    skipped_.push_back(i);
  }
  while (next_skipped_ < skipped_.size()) {
    const size_t i = skipped_[next_skipped_++];
    if (!taken(i)) return i;
  }
  return std::nullopt;
}

Config MutateConfig(const ConfigSpace& space, const Config& config, int repair_tries,
                    std::mt19937_64* rng) {
  const std::vector<Knob>& knobs = space.knobs();
  auto any = [rng](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(*rng); };
  for (int attempt = 0; attempt < 8; ++attempt) {
    const Knob& k = knobs[any(knobs.size())];
    if (k.values.size() < 2) continue;
    nlohmann::json values = config.values();
    values[k.name] = k.values[any(k.values.size())];
    Config next(values);
    if (next == config) continue;
    if (space.Check(next).ok()) return next;
    // A change of algorithm (a structural knob) is not repaired: the other knobs would
    // move to fit the new algorithm and the walk would hop between algorithms, which the
    // batch's structural quota explores already (conv2d 128@28^2 cold: 23 -> 33 trials
    // to 95% with, 25 without).
    for (int repair = 0; !k.structural && repair < repair_tries; ++repair) {
      const Knob& other = knobs[any(knobs.size())];
      if (other.name == k.name || other.values.size() < 2) continue;
      nlohmann::json repaired = values;
      repaired[other.name] = other.values[any(other.values.size())];
      Config fixed(std::move(repaired));
      if (!(fixed == config) && space.Check(fixed).ok()) return fixed;
    }
  }
  return config;
}

RandomPolicy::RandomPolicy(ConfigSpace space, uint64_t seed)
    : space_(std::move(space)), rng_(seed) {}

std::vector<Config> RandomPolicy::Propose(int n) {
  std::vector<Config> out;
  SampleUnvisited(space_, n, &rng_, &visited_, &out);
  return out;
}

void RandomPolicy::Observe(const std::vector<TuningRecord>& records) {
  for (const TuningRecord& r : records) {
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (c.ok()) visited_.insert(space_.WithDefaults(*c).ToJson());
  }
}

GridPolicy::GridPolicy(ConfigSpace space, uint64_t seed)
    : space_(std::move(space)), raw_size_(space_.RawSize()) {
  std::mt19937_64 rng(seed);
  start_ = rng() % raw_size_;
  // A stride near raw/phi, moved to the next value coprime to raw_size_.
  stride_ = std::max<uint64_t>(1, static_cast<uint64_t>(raw_size_ * 0.6180339887));
  while (std::gcd(stride_, raw_size_) != 1) ++stride_;
}

std::vector<Config> GridPolicy::Propose(int n) {
  std::vector<Config> out;
  while (static_cast<int>(out.size()) < n && next_ < raw_size_) {
    // (start + i*stride) mod raw without overflow: raw sizes are far below 2^32 today,
    // but use 128-bit arithmetic so larger spaces stay correct.
    uint64_t index = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(next_) * stride_ + start_) % raw_size_);
    ++next_;
    Config c = space_.At(index);
    if (!space_.Check(c).ok() || !visited_.insert(c.ToJson()).second) continue;
    out.push_back(std::move(c));
  }
  return out;
}

void GridPolicy::Observe(const std::vector<TuningRecord>& records) {
  for (const TuningRecord& r : records) {
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (c.ok()) visited_.insert(space_.WithDefaults(*c).ToJson());
  }
}

const std::vector<std::string>& SearchPolicyNames() {
  static const std::vector<std::string> names = {"model", "random", "grid", "ga"};
  return names;
}

absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               const PolicyContext& context) {
  if (!context.tmpl) return absl::InvalidArgumentError("search policy needs a template");
  ConfigSpace space = context.tmpl->Space(context.task, context.target);
  if (name == "random") return std::make_unique<RandomPolicy>(std::move(space), context.seed);
  if (name == "grid") return std::make_unique<GridPolicy>(std::move(space), context.seed);
  if (name == "ga") return std::make_unique<GeneticPolicy>(context, GeneticOptions{});
  if (name.empty() || name == "model") {
    ModelPolicyOptions options;
    if (context.model_early_batch) {
      if (*context.model_early_batch < 0)
        return absl::InvalidArgumentError("model early batch must be >= 0 (0: off), got " +
                                          std::to_string(*context.model_early_batch));
      options.early_batch = *context.model_early_batch;
    }
    return std::make_unique<ModelPolicy>(context, options);
  }
  return absl::InvalidArgumentError("unknown search policy '" + name +
                                    "' (available: model, random, grid, ga)");
}

absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               ConfigSpace space, uint64_t seed) {
  if (name.empty() || name == "random")
    return std::make_unique<RandomPolicy>(std::move(space), seed);
  if (name == "grid") return std::make_unique<GridPolicy>(std::move(space), seed);
  return absl::InvalidArgumentError("search policy '" + name +
                                    "' needs the task and target (use the PolicyContext overload)");
}

}  // namespace tuneforge
