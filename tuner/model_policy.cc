// ModelPolicy: the cost-model-guided search (annealing walks, batch picks, quotas, probes).
#include "tuner/model_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "compiler/support/log.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

// "knob=value", the value as JSON text.
std::string KnobValue(const Knob& k, const nlohmann::json& value) { return k.name + "=" + value.dump(); }
// ... of a config (null when the config lacks the knob).
std::string KnobValue(const Knob& k, const Config& c) {
  return KnobValue(k, c.values().value(k.name, nlohmann::json()));
}

// Indices of `scores`, the highest score first (equal scores in index order).
std::vector<size_t> BestScoredFirst(const std::vector<float>& scores) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  return order;
}

}  // namespace

std::vector<std::string> ModelPolicy::TakeWarnings() {
  std::vector<std::string> out = std::exchange(warnings_, {});
  for (std::string& w : cost_model_.TakeWarnings()) out.push_back(std::move(w));
  return out;
}

void ModelPolicy::Warn(std::string warning) {
  TF_LOG(Warning) << warning;
  warnings_.push_back(std::move(warning));
}

ModelPolicy::ModelPolicy(const PolicyContext& context, ModelPolicyOptions options)
    : context_(context),
      space_(context.tmpl->Space(context.task, context.target)),
      options_(options),
      cost_model_(context, options.cost_model),
      rng_(context.seed) {}

void ModelPolicy::Observe(const std::vector<TuningRecord>& records) {
  std::vector<TuningRecord> others;
  for (const TuningRecord& r : records) {
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (!c.ok()) continue;
    if (r.workload.key != context_.task.WorkloadKey()) {
      others.push_back(r);
      continue;
    }
    const Config full = space_.WithDefaults(*c);  // a missing knob is its default
    visited_.insert(full.ToJson());
    if (cost_model_.AddOwn(full, RecordThroughput(r))) {
      CountStructural(full);
      for (const Knob& k : space_.knobs()) ++value_count_[KnobValue(k, full)];
    }
  }
  if (!others.empty()) ObserveOtherTasks(others);
}

void ModelPolicy::ObserveOtherTasks(const std::vector<TuningRecord>& records) {
  if (!cost_model_.WantsOtherTasks()) return;
  // Newest first, up to the model's cap.
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (!cost_model_.AddOtherTask(*it)) continue;
    // Other shapes' measurements of an algorithm teach the model about it too.
    CountStructural(space_.WithDefaults(*Config::FromJson(it->config_json)));
  }
}

std::vector<Config> ModelPolicy::PriorConfigs(int n) {
  std::vector<Config> pool;
  std::set<std::string> drawn = visited_;
  SampleUnvisited(space_, n * options_.prior_pool, &rng_, &drawn, &pool);
  const std::vector<float> prior = cost_model_.HardwarePriorOf(pool);
  std::vector<const Config*> ranked;
  for (size_t i : BestScoredFirst(prior)) ranked.push_back(&pool[i]);
  // Distinct from the measured configs too: this runs for the first few batches.
  std::vector<Config> near;
  for (const auto& [key, t] : cost_model_.own_throughput()) {
    absl::StatusOr<Config> c = Config::FromJson(key);
    if (c.ok()) near.push_back(*std::move(c));
  }
  std::vector<Config> out;
  DiversePicker picker(space_, options_.min_knob_distance);
  auto taken = [&](size_t i) { return visited_.count(ranked[i]->ToJson()) > 0; };
  while (static_cast<int>(out.size()) < n) {
    std::optional<size_t> pick = picker.Next(ranked, near, taken);
    if (!pick) break;
    visited_.insert(ranked[*pick]->ToJson());
    near.push_back(*ranked[*pick]);
    out.push_back(*ranked[*pick]);
  }
  return out;
}

void ModelPolicy::CountStructural(const Config& config) {
  for (const Knob& k : space_.knobs())
    if (k.structural) ++structural_count_[KnobValue(k, config)];
}

std::vector<Config> ModelPolicy::StructuralPicks(
    const std::vector<std::pair<float, std::string>>& ranked, const ScoredPool& pool,
    int max_picks) {
  std::vector<Config> out;
  // A log model was trained on the shared log's measurements of every algorithm.
  if (options_.structural_quota <= 0 || cost_model_.has_log_model()) return out;
  auto take = [&](const Config& c) {
    if (static_cast<int>(out.size()) >= max_picks || !visited_.insert(c.ToJson()).second) return;
    out.push_back(c);
  };
  for (const Knob& k : space_.knobs()) {
    if (!k.structural || k.values.size() < 2) continue;
    for (const nlohmann::json& value : k.values) {
      auto counted = structural_count_.find(KnobValue(k, value));
      const int measured = counted == structural_count_.end() ? 0 : counted->second;
      const int missing = std::min(2, options_.structural_quota - measured);
      if (missing <= 0) continue;
      const size_t want = out.size() + static_cast<size_t>(missing);
      auto has_value = [&](const Config& c) {
        return c.values().value(k.name, nlohmann::json()) == value;
      };
      // The walks' best candidates with this value, ...
      for (size_t i = 0; i < ranked.size() && out.size() < want; ++i) {
        const Config& c = pool.at(ranked[i].second).second;
        if (has_value(c)) take(c);
      }
      if (out.size() >= want || static_cast<int>(out.size()) >= max_picks) continue;
      // ... or, when the walks never went there (the model scores it low), the
      // best-scored of random configs with it.
      std::vector<Config> drawn;
      for (int tries = 0; tries < 4000 && drawn.size() < 64; ++tries) {
        absl::StatusOr<Config> c = space_.Sample(rng_, 1000);
        if (c.ok() && has_value(*c) && !visited_.count(c->ToJson())) drawn.push_back(*std::move(c));
      }
      absl::StatusOr<std::vector<float>> scores = cost_model_.Predict(drawn);
      if (!scores.ok()) {
        // The quota of this value goes unfilled in this batch; the job says so.
        warnings_.push_back("cost model scoring failed for the structural quota (" + k.name +
                           " values unfilled this batch): " + std::string(scores.status().message()));
        continue;
      }
      const std::vector<size_t> order = BestScoredFirst(*scores);
      for (size_t i = 0; i < order.size() && out.size() < want; ++i)
        if (std::isfinite((*scores)[order[i]])) take(drawn[order[i]]);
    }
  }
  return out;
}

std::vector<Config> ModelPolicy::IncumbentProbes(const Config& incumbent, int max_picks) {
  std::vector<Config> out;
  if (max_picks <= 0 || cost_model_.has_log_model()) return out;
  // Its unvisited valid neighbours whose new value has fewer than probe_quota own
  // measurements, the best-scored first.
  std::vector<Config> neighbours;
  for (const Knob& k : space_.knobs()) {
    for (const nlohmann::json& value : k.values) {
      if (incumbent.values().value(k.name, nlohmann::json()) == value) continue;
      auto counted = value_count_.find(KnobValue(k, value));
      if (counted != value_count_.end() && counted->second >= options_.probe_quota) continue;
      nlohmann::json values = incumbent.values();
      values[k.name] = value;
      Config c(std::move(values));
      if (!space_.Check(c).ok() || visited_.count(c.ToJson())) continue;
      neighbours.push_back(std::move(c));
    }
  }
  if (neighbours.empty()) return out;
  absl::StatusOr<std::vector<float>> scores = cost_model_.Predict(neighbours);
  if (!scores.ok()) return out;
  const std::vector<size_t> order = BestScoredFirst(*scores);
  for (size_t i = 0; i < order.size() && static_cast<int>(out.size()) < max_picks; ++i) {
    visited_.insert(neighbours[order[i]].ToJson());
    out.push_back(std::move(neighbours[order[i]]));
  }
  return out;
}

std::vector<Config> ModelPolicy::RandomConfigs(int n) {
  std::vector<Config> out;
  SampleUnvisited(space_, n, &rng_, &visited_, &out);
  return out;
}

std::vector<Config> ModelPolicy::Propose(int n) {
  proposer_ = "model";
  if (n <= 0) return {};
  if (options_.early_batch > 0 && !cost_model_.has_log_model() && cost_model_.other_task_rows() == 0 &&
      static_cast<int>(cost_model_.own_throughput().size()) < options_.early_batch_rows)
    n = std::min(n, options_.early_batch);
  absl::Status st = cost_model_.Update();
  if (!st.ok()) {
    Warn("cost model training failed, proposed at random: " + std::string(st.message()));
  }
  if (!cost_model_.can_predict() || !st.ok()) {
    proposer_ = "model:random";
    if (!st.ok()) return RandomConfigs(n);
    return options_.prior_pool > 0 ? PriorConfigs(n) : RandomConfigs(n);
  }

  // Start points: the best measured configs, then random ones.
  std::vector<std::pair<double, std::string>> measured;
  for (const auto& [key, t] : cost_model_.own_throughput())
    if (t > 0) measured.emplace_back(t, key);
  std::sort(measured.rbegin(), measured.rend());
  std::vector<Config> current;
  for (size_t i = 0; i < measured.size() && static_cast<int>(current.size()) < options_.chains / 2;
       ++i)
    current.push_back(*Config::FromJson(measured[i].second));
  while (static_cast<int>(current.size()) < options_.chains) {
    absl::StatusOr<Config> c = space_.Sample(rng_, 1000);
    if (!c.ok()) break;
    current.push_back(*std::move(c));
  }
  absl::StatusOr<std::vector<float>> scores = cost_model_.Predict(current);
  if (!scores.ok()) {
    Warn("cost model scoring failed, proposed at random: " + std::string(scores.status().message()));
    proposer_ = "model:random";
    return RandomConfigs(n);
  }
  std::vector<float> cur_score = *scores;

  // Best-scored unvisited configs seen by any walk.
  ScoredPool pool;
  auto offer = [&](const Config& c, float s) {
    std::string key = c.ToJson();
    if (std::isfinite(s) && !visited_.count(key)) pool.emplace(key, std::make_pair(s, c));
  };
  for (size_t i = 0; i < current.size(); ++i) offer(current[i], cur_score[i]);

  // Temperature from the spread of the start scores (rank scores have no fixed scale),
  // cooling linearly to zero.
  double mean = 0, var = 0;
  int finite = 0;
  for (float s : cur_score)
    if (std::isfinite(s)) mean += s, ++finite;
  mean /= std::max(1, finite);
  for (float s : cur_score)
    if (std::isfinite(s)) var += (s - mean) * (s - mean);
  double t0 = std::max(1e-3, std::sqrt(var / std::max(1, finite)));
  std::uniform_real_distribution<double> u(0, 1);
  for (int step = 0; step < options_.steps; ++step) {
    double temperature = t0 * (1.0 - static_cast<double>(step) / options_.steps);
    std::vector<Config> next;
    for (const Config& c : current) next.push_back(MutateConfig(space_, c, options_.repair_tries, &rng_));
    absl::StatusOr<std::vector<float>> next_score = cost_model_.Predict(next);
    if (!next_score.ok()) {
      // The walk stops early; the batch is still ranked by the model (what it scored).
      Warn("cost model scoring failed at annealing step " + std::to_string(step) + ": " +
           std::string(next_score.status().message()));
      break;
    }
    for (size_t i = 0; i < current.size(); ++i) {
      float s = (*next_score)[i];
      offer(next[i], s);
      double delta = s - cur_score[i];
      if (delta >= 0 || (temperature > 0 && u(rng_) < std::exp(delta / temperature))) {
        current[i] = std::move(next[i]);
        cur_score[i] = s;
      }
    }
  }

  // Trees score many configs exactly alike: break ties at random (from the policy's
  // seed, so a run is reproducible), not by config text, which would always favour the
  // same knob values among equals.
  std::vector<std::pair<float, std::string>> ranked;
  for (const auto& [key, entry] : pool) ranked.emplace_back(entry.first, key);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  std::shuffle(ranked.begin(), ranked.end(), rng_);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // A diverse batch (DiversePicker), with random configs in the exploration slots.
  // The batch in measurement order: quota picks, the probes (only in a batch without
  // quota picks), the ranked picks.
  std::vector<Config> out = StructuralPicks(ranked, pool, n / 2);
  if (!measured.empty() && out.empty()) {
    out = IncumbentProbes(*Config::FromJson(measured[0].second), std::min(options_.incumbent_probes, n));
  }
  std::vector<const Config*> candidates;
  for (const auto& [score, key] : ranked) candidates.push_back(&pool.at(key).second);
  DiversePicker picker(space_, options_.min_knob_distance);
  auto taken = [&](size_t i) { return visited_.count(ranked[i].second) > 0; };
  for (int slot = static_cast<int>(out.size()); slot < n; ++slot) {
    bool explore = u(rng_) < options_.epsilon;
    if (!explore) {
      if (std::optional<size_t> pick = picker.Next(candidates, out, taken)) {
        visited_.insert(ranked[*pick].second);
        out.push_back(*candidates[*pick]);
        continue;
      }
    }
    std::vector<Config> r = RandomConfigs(1);
    if (r.empty()) break;
    out.push_back(std::move(r[0]));
  }
  return out;
}

}  // namespace tuneforge
