// ModelPolicy: the XGBoost-guided search (proposals, retraining, priors).
#include "tuner/model_policy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <thread>

#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "tuner/model_store.h"

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

double RecordThroughput(const TuningRecord& r) {
  if (r.result.error != MeasureErrorKind::kNone) return 0;
  double cost = r.result.MedianCost();
  return std::isfinite(cost) && cost > 0 ? r.workload.flops / cost : 0;
}

// Labels are relative to the best throughput of the group, so every task's labels
// have the same range whatever its size.
void AppendRankLabels(const std::vector<double>& throughput, std::vector<float>* labels) {
  double best = *std::max_element(throughput.begin(), throughput.end());
  for (double t : throughput) labels->push_back(static_cast<float>(best > 0 ? t / best : 0));
}

ModelPolicy::ModelPolicy(const PolicyContext& context, ModelPolicyOptions options)
    : context_(context),
      space_(context.tmpl->Space(context.task, context.target)),
      options_(options),
      extractor_(space_, context.target, options.features),
      model_(options.xgb),
      rng_(context.seed) {
  const std::vector<std::string> names = extractor_.Names();
  auto index = [&](const char* name) {
    auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<int>(it - names.begin());
  };
  prior_index_ = {index("vector_lanes_over_max"),       index("has_parallel"),
                  index("parallel_extent_over_cores"),  index("parallel_balance"),
                  index("accumulators_over_registers"), index("register_tile_over_registers")};
  if (options_.prior_pool > 0 || options_.prior_margin > 0) {
    // A term whose feature this layout lacks counts 0: the prior is weaker than its
    // design, and the job says so.
    std::vector<std::string> missing;
    for (const char* name : {"vector_lanes_over_max", "has_parallel", "parallel_extent_over_cores",
                             "parallel_balance", "accumulators_over_registers", "register_tile_over_registers"})
      if (index(name) < 0) missing.push_back(name);
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      notices_.push_back("hardware prior incomplete, its terms of missing features count 0: " + list);
    }
  }
  if (!context_.model_store) return;
  // The log model first: when there is one, the last job's model (trained on another
  // task) has nothing to add to it.
  const std::string name = context_.tmpl->name(), target = context_.target.Key();
  const int version = context_.tmpl->version();
  for (auto [key, model] : {std::pair{LogModelKey(name, version, target), &prior_},
                            std::pair{OwnModelKey(), &model_}}) {
    if (prior_.trained()) break;
    auto bytes = context_.model_store->Load(key);
    if (!bytes.ok()) {
      TF_LOG(Warning) << "cannot read stored cost model " << key << ": " << bytes.status();
      notices_.push_back("stored cost model unreadable, this job starts without it: " + key + ": " +
                         std::string(bytes.status().message()));
      continue;
    }
    if (!bytes->has_value()) continue;
    // Loaded into a scratch model first: one of another feature length is not taken.
    costmodel::XgbModel scratch(model->params());
    absl::Status st = scratch.LoadFromBytes(**bytes);
    if (st.ok() && scratch.num_features() != extractor_.size())
      st = absl::FailedPreconditionError("it has " + std::to_string(scratch.num_features()) +
                                         " features, this task has " + std::to_string(extractor_.size()));
    if (st.ok()) {
      *model = std::move(scratch);
      // The last job's model was trained on top of the hardware prior (OwnModelKey).
      hardware_margin_ = model == &model_ && options_.prior_margin > 0;
    } else {
      TF_LOG(Warning) << "ignoring stored cost model " << key << ": " << st;
      notices_.push_back("stored cost model ignored, this job starts without it: " + key + ": " +
                         std::string(st.message()));
    }
  }
}

std::string ModelPolicy::OwnModelKey() const {
  std::string key = ModelKey(context_.tmpl->name(), context_.tmpl->version(), context_.target.Key());
  if (options_.prior_margin <= 0) return key;
  // Its scores are model + weight x prior: a model trained on another weight, or on
  // none, is not this one's starting point.
  std::ostringstream weight;
  weight << options_.prior_margin;
  return key + "/hw" + weight.str();
}

int ModelPolicy::rows() const { return static_cast<int>(own_.size()) + transfer_count_; }

bool ModelPolicy::FeaturesOf(const TuningTask& task, const Config& config,
                             costmodel::FeatureVector* out) {
  bool own = task.WorkloadKey() == context_.task.WorkloadKey();
  std::string key = config.ToJson();
  if (own) {
    auto it = feature_cache_.find(key);
    if (it != feature_cache_.end()) {
      *out = it->second;
      return !out->empty();
    }
  }
  absl::StatusOr<ir::LoweredFunc> func = context_.tmpl->InstantiateKernel(task, context_.target, config);
  out->clear();
  if (func.ok()) *out = extractor_.Extract(*func, config);
  if (own) {
    if (feature_cache_.size() > 200000) feature_cache_.clear();  // bound memory
    feature_cache_[key] = *out;
  }
  return !out->empty();
}

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
    const std::string key = full.ToJson();
    visited_.insert(key);
    auto [it, fresh] = own_.emplace(key, 0.0);
    it->second = std::max(it->second, RecordThroughput(r));
    if (fresh) {
      CountStructural(full);
      for (const Knob& k : space_.knobs()) ++value_count_[KnobValue(k, full)];
    }
    dirty_ = true;
  }
  if (!others.empty()) ObserveOtherTasks(others);
}

void ModelPolicy::ObserveOtherTasks(const std::vector<TuningRecord>& records) {
  if (!WantsOtherTasks()) return;
  // Newest first, up to the cap.
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    const TuningRecord& r = *it;
    if (transfer_count_ >= options_.max_transfer_records) break;
    if (r.template_name != context_.tmpl->name() ||
        r.template_version != context_.tmpl->version() || r.target.key != context_.target.Key() ||
        r.workload.key == context_.task.WorkloadKey())
      continue;
    absl::StatusOr<TuningTask> task = ParseTask(r.workload.task_text);
    absl::StatusOr<Config> config = Config::FromJson(r.config_json);
    if (!task.ok() || !config.ok() || task->op() != context_.task.op()) continue;
    costmodel::FeatureVector f;
    if (!FeaturesOf(*task, *config, &f)) continue;
    // Other shapes' measurements of an algorithm teach the model about it too.
    CountStructural(space_.WithDefaults(*config));
    Group& g = transfer_[r.workload.key];
    g.rows.push_back(std::move(f));
    g.throughput.push_back(RecordThroughput(r));
    ++transfer_count_;
    dirty_ = true;
  }
}

absl::Status ModelPolicy::Retrain() {
  if (!dirty_ || rows() < options_.min_records) return absl::OkStatus();
  auto start = std::chrono::steady_clock::now();
  std::vector<costmodel::FeatureVector> rows;
  std::vector<float> labels;
  std::vector<unsigned> groups;
  for (const auto& [key, g] : transfer_) {
    if (g.rows.size() < 2) continue;
    rows.insert(rows.end(), g.rows.begin(), g.rows.end());
    AppendRankLabels(g.throughput, &labels);
    groups.push_back(static_cast<unsigned>(g.rows.size()));
  }
  std::vector<double> own_throughput;
  for (const auto& [key, t] : own_) {
    costmodel::FeatureVector f;
    absl::StatusOr<Config> c = Config::FromJson(key);
    if (!c.ok() || !FeaturesOf(context_.task, *c, &f)) continue;
    rows.push_back(std::move(f));
    own_throughput.push_back(t);
  }
  if (!own_throughput.empty()) {
    AppendRankLabels(own_throughput, &labels);
    groups.push_back(static_cast<unsigned>(own_throughput.size()));
  }
  if (static_cast<int>(rows.size()) < options_.min_records) return absl::OkStatus();
  // With a log model, the own model starts from its scores and learns the corrections.
  std::vector<float> margin;
  if (prior_.trained()) {
    ASSIGN_OR_RETURN(margin, prior_.Predict(rows));
  }
  hardware_margin_ = options_.prior_margin > 0 && !prior_.trained();
  if (hardware_margin_)
    for (const costmodel::FeatureVector& f : rows)
      margin.push_back(static_cast<float>(options_.prior_margin) * HardwarePrior(f));
  absl::Status st = model_.Train(rows, labels, groups, margin);
  dirty_ = false;
  fine_tuned_ = st.ok() && prior_.trained();
  last_train_seconds_ = SecondsSince(start);
  RETURN_IF_ERROR(st);
  TF_LOG(Debug) << "cost model trained on " << rows.size() << " rows in " << last_train_seconds_
                << " s";
  // A fine-tuned model only corrects the log model: alone it is no job's starting
  // point, so only a standalone model (or one on top of the hardware prior, under its
  // own key) is kept for the next job.
  if (context_.model_store && !fine_tuned_) {
    absl::StatusOr<std::string> bytes = model_.SaveToBytes();
    absl::Status saved =
        bytes.ok()
            ? context_.model_store->Save(OwnModelKey(), *bytes)
            : bytes.status();
    if (!saved.ok()) {
      TF_LOG(Warning) << "could not save the cost model: " << saved;
      notices_.push_back("cost model not saved, the next job starts without it: " + std::string(saved.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<costmodel::FeatureVector> ModelPolicy::OwnFeatures(const std::vector<Config>& configs) {
  std::vector<costmodel::FeatureVector> out(configs.size());
  std::vector<std::string> keys(configs.size());
  std::vector<size_t> misses;
  for (size_t i = 0; i < configs.size(); ++i) {
    keys[i] = configs[i].ToJson();
    auto it = feature_cache_.find(keys[i]);
    if (it != feature_cache_.end())
      out[i] = it->second;
    else
      misses.push_back(i);
  }
  // Lowering + extraction of the misses; each worker writes only its own slots. The
  // template is stateless and the extractor immutable (both thread-safe). The workers
  // take small runs of candidates as they go rather than a fixed share each: a share
  // per thread left the new thread finishing up to 60% after this one (a fresh
  // thread's allocator arena faults its pages in; a VM's second CPU may be slower), and
  // candidates differ in cost (a Winograd conv2d lowers to 3x the nodes of a direct
  // one).
  constexpr size_t kRun = 16;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t begin = next.fetch_add(kRun); begin < misses.size(); begin = next.fetch_add(kRun)) {
      for (size_t m = begin; m < std::min(misses.size(), begin + kRun); ++m) {
        size_t i = misses[m];
        absl::StatusOr<ir::LoweredFunc> func =
            context_.tmpl->InstantiateKernel(context_.task, context_.target, configs[i]);
        if (func.ok()) out[i] = extractor_.Extract(*func, configs[i]);
      }
    }
  };
  size_t threads = std::clamp<size_t>(options_.scoring_threads, 1, 16);
  if (misses.size() < 64) threads = 1;  // not worth a thread
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (feature_cache_.size() + misses.size() > 200000) feature_cache_.clear();  // bound memory
  for (size_t i : misses) feature_cache_[keys[i]] = out[i];
  return out;
}

absl::StatusOr<std::vector<float>> ModelPolicy::Score(const std::vector<Config>& configs) {
  if (!can_score()) return absl::FailedPreconditionError("no cost model yet");
  std::vector<costmodel::FeatureVector> features = OwnFeatures(configs);
  std::vector<costmodel::FeatureVector> rows;
  std::vector<size_t> row_of(configs.size(), SIZE_MAX);
  for (size_t i = 0; i < configs.size(); ++i) {
    if (features[i].empty()) continue;
    row_of[i] = rows.size();
    rows.push_back(std::move(features[i]));
  }
  std::vector<float> scores(configs.size(), -INFINITY);
  if (rows.empty()) return scores;
  // The own model alone, the log model alone (before the task has enough records of
  // its own), or both added (the own model was trained on top of the log model).
  const bool use_own = model_.trained() && (!prior_.trained() || fine_tuned_);
  std::vector<float> own, prior;
  if (use_own) {
    ASSIGN_OR_RETURN(own, model_.Predict(rows));
  }
  if (prior_.trained()) {
    ASSIGN_OR_RETURN(prior, prior_.Predict(rows));
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    if (row_of[i] == SIZE_MAX) continue;
    const size_t r = row_of[i];
    scores[i] = (use_own ? own[r] : 0.0f) + (prior_.trained() ? prior[r] : 0.0f);
    if (use_own && hardware_margin_)
      scores[i] += static_cast<float>(options_.prior_margin) * HardwarePrior(rows[r]);
  }
  return scores;
}

float ModelPolicy::HardwarePrior(const costmodel::FeatureVector& f) const {
  if (f.empty()) return 0;
  auto at = [&](int i) { return i >= 0 && i < static_cast<int>(f.size()) ? f[i] : 0.0f; };
  const PriorIndex& x = prior_index_;
  // The widest vectors the target has.
  const float lanes = at(x.lanes);
  // A parallel loop with work for every thread, evenly shared.
  const float parallel =
      at(x.has_parallel) * std::min(1.0f, at(x.parallel_extent)) * at(x.parallel_balance);
  // Accumulators that fill 3/8 to 4/5 of the vector registers: enough independent
  // FMAs to hide their latency, room left for the operands.
  const float acc = at(x.accumulators);
  const float fill = acc < 0.375f ? acc / 0.375f : acc <= 0.8f ? 1.0f : std::max(0.0f, 1 - (acc - 0.8f) / 0.2f);
  // A register tile that spills.
  const float spill = std::min(1.0f, std::max(0.0f, at(x.register_tile) - 1));
  return lanes + parallel + fill - spill;
}

std::vector<float> ModelPolicy::HardwarePriorOf(const std::vector<Config>& configs) {
  std::vector<float> prior;
  for (const costmodel::FeatureVector& f : OwnFeatures(configs))
    prior.push_back(f.empty() ? -INFINITY : HardwarePrior(f));
  return prior;
}

std::vector<Config> ModelPolicy::PriorConfigs(int n) {
  std::vector<Config> pool;
  std::set<std::string> drawn = visited_;
  SampleUnvisited(space_, n * options_.prior_pool, &rng_, &drawn, &pool);
  const std::vector<float> prior = HardwarePriorOf(pool);
  std::vector<const Config*> ranked;
  for (size_t i : BestScoredFirst(prior)) ranked.push_back(&pool[i]);
  // Distinct from the measured configs too: this runs for the first few batches.
  std::vector<Config> near;
  for (const auto& [key, t] : own_) {
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
  if (options_.structural_quota <= 0 || prior_.trained()) return out;
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
      absl::StatusOr<std::vector<float>> scores = Score(drawn);
      if (!scores.ok()) {
        // The quota of this value goes unfilled in this batch; the job says so.
        notices_.push_back("cost model scoring failed for the structural quota (" + k.name +
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
  if (max_picks <= 0 || prior_.trained()) return out;
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
  absl::StatusOr<std::vector<float>> scores = Score(neighbours);
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
  failure_.clear();
  if (n <= 0) return {};
  if (options_.early_batch > 0 && !prior_.trained() && transfer_count_ == 0 &&
      static_cast<int>(own_.size()) < options_.early_batch_rows)
    n = std::min(n, options_.early_batch);
  absl::Status st = Retrain();
  if (!st.ok()) {
    failure_ = "cost model training failed, proposed at random: " + std::string(st.message());
    TF_LOG(Warning) << failure_;
  }
  if (!can_score() || !st.ok()) {
    proposer_ = "model:random";
    if (!st.ok()) return RandomConfigs(n);
    return options_.prior_pool > 0 ? PriorConfigs(n) : RandomConfigs(n);
  }

  // Start points: the best measured configs, then random ones.
  std::vector<std::pair<double, std::string>> measured;
  for (const auto& [key, t] : own_)
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
  absl::StatusOr<std::vector<float>> scores = Score(current);
  if (!scores.ok()) {
    failure_ = "cost model scoring failed, proposed at random: " + std::string(scores.status().message());
    TF_LOG(Warning) << failure_;
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
    absl::StatusOr<std::vector<float>> next_score = Score(next);
    if (!next_score.ok()) {
      // The walk stops early; the batch is still ranked by the model (what it scored).
      failure_ = "cost model scoring failed at annealing step " + std::to_string(step) + ": " +
                 std::string(next_score.status().message());
      TF_LOG(Warning) << failure_;
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
