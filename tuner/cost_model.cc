// CostModel: features, XGBoost trees, the log model and the hardware prior of one task.
#include "tuner/cost_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "tuner/model_store.h"

namespace tuneforge {

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

CostModel::CostModel(const PolicyContext& context, CostModelOptions options)
    : context_(context),
      space_(context.tmpl->Space(context.task, context.target)),
      options_(options),
      extractor_(space_, context.target, options.features),
      own_model_(options.xgb) {
  const std::vector<std::string> names = extractor_.Names();
  auto index = [&](const char* name) {
    auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<int>(it - names.begin());
  };
  prior_index_ = {index("vector_lanes_over_max"),       index("has_parallel"),
                  index("parallel_extent_over_cores"),  index("parallel_balance"),
                  index("accumulators_over_registers"), index("register_tile_over_registers")};
  for (const char* name : {"vector_lanes_over_max", "has_parallel", "parallel_extent_over_cores",
                           "parallel_balance", "accumulators_over_registers", "register_tile_over_registers"})
    if (index(name) < 0) prior_missing_ += (prior_missing_.empty() ? "" : ", ") + std::string(name);
  if (options_.hardware_prior_weight > 0) WarnIfPriorIncomplete();
  if (context_.model_store) LoadStored();
}

void CostModel::WarnIfPriorIncomplete() {
  // A term whose feature this layout lacks counts 0: the prior is weaker than its
  // design, and the job says so (once).
  if (prior_missing_.empty() || prior_warned_) return;
  prior_warned_ = true;
  warnings_.push_back("hardware prior incomplete, its terms of missing features count 0: " + prior_missing_);
}

void CostModel::LoadStored() {
  // The log model first: when there is one, the last job's model (trained on another
  // task) has nothing to add to it.
  const std::string name = context_.tmpl->name(), target = context_.target.Key();
  const int version = context_.tmpl->version();
  for (auto [key, model] : {std::pair{LogModelKey(name, version, target), &log_model_},
                            std::pair{OwnModelKey(), &own_model_}}) {
    if (log_model_.trained()) break;
    auto bytes = context_.model_store->Load(key);
    if (!bytes.ok()) {
      TF_LOG(Warning) << "cannot read stored cost model " << key << ": " << bytes.status();
      warnings_.push_back("stored cost model unreadable, this job starts without it: " + key + ": " +
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
      on_hardware_prior_ = model == &own_model_ && options_.hardware_prior_weight > 0;
    } else {
      TF_LOG(Warning) << "ignoring stored cost model " << key << ": " << st;
      warnings_.push_back("stored cost model ignored, this job starts without it: " + key + ": " +
                          std::string(st.message()));
    }
  }
}

std::string CostModel::OwnModelKey() const {
  std::string key = ModelKey(context_.tmpl->name(), context_.tmpl->version(), context_.target.Key());
  if (options_.hardware_prior_weight <= 0) return key;
  // Its scores are model + weight x prior: a model trained on another weight, or on
  // none, is not this one's starting point.
  std::ostringstream weight;
  weight << options_.hardware_prior_weight;
  return key + "/hw" + weight.str();
}

bool CostModel::AddOwn(const Config& config, double throughput) {
  auto [it, fresh] = own_.emplace(config.ToJson(), 0.0);
  it->second = std::max(it->second, throughput);
  dirty_ = true;
  return fresh;
}

bool CostModel::WantsOtherTasks() const {
  return !log_model_.trained() || options_.transfer_with_log_model;
}

bool CostModel::AddOtherTask(const TuningRecord& r) {
  if (!WantsOtherTasks() || other_rows_ >= options_.max_transfer_records) return false;
  if (r.template_name != context_.tmpl->name() || r.template_version != context_.tmpl->version() ||
      r.target.key != context_.target.Key() || r.workload.key == context_.task.WorkloadKey())
    return false;
  absl::StatusOr<TuningTask> task = ParseTask(r.workload.task_text);
  absl::StatusOr<Config> config = Config::FromJson(r.config_json);
  if (!task.ok() || !config.ok() || task->op() != context_.task.op()) return false;
  costmodel::FeatureVector f;
  if (!FeaturesOf(*task, *config, &f)) return false;
  Group& g = other_[r.workload.key];
  g.rows.push_back(std::move(f));
  g.throughput.push_back(RecordThroughput(r));
  ++other_rows_;
  dirty_ = true;
  return true;
}

bool CostModel::FeaturesOf(const TuningTask& task, const Config& config,
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

absl::Status CostModel::Update() {
  if (!dirty_ || rows() < options_.min_records) return absl::OkStatus();
  auto start = std::chrono::steady_clock::now();
  std::vector<costmodel::FeatureVector> rows;
  std::vector<float> labels;
  std::vector<unsigned> groups;
  for (const auto& [key, g] : other_) {
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
  if (log_model_.trained()) {
    ASSIGN_OR_RETURN(margin, log_model_.Predict(rows));
  }
  on_hardware_prior_ = options_.hardware_prior_weight > 0 && !log_model_.trained();
  if (on_hardware_prior_)
    for (const costmodel::FeatureVector& f : rows)
      margin.push_back(static_cast<float>(options_.hardware_prior_weight) * HardwarePrior(f));
  absl::Status st = own_model_.Train(rows, labels, groups, margin);
  dirty_ = false;
  fine_tuned_ = st.ok() && log_model_.trained();
  last_train_seconds_ = SecondsSince(start);
  RETURN_IF_ERROR(st);
  TF_LOG(Debug) << "cost model trained on " << rows.size() << " rows in " << last_train_seconds_
                << " s";
  // A fine-tuned model only corrects the log model: alone it is no job's starting
  // point, so only a standalone model (or one on top of the hardware prior, under its
  // own key) is kept for the next job.
  if (context_.model_store && !fine_tuned_) {
    absl::StatusOr<std::string> bytes = own_model_.SaveToBytes();
    absl::Status saved =
        bytes.ok()
            ? context_.model_store->Save(OwnModelKey(), *bytes)
            : bytes.status();
    if (!saved.ok()) {
      TF_LOG(Warning) << "could not save the cost model: " << saved;
      warnings_.push_back("cost model not saved, the next job starts without it: " + std::string(saved.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<costmodel::FeatureVector> CostModel::OwnFeatures(const std::vector<Config>& configs) {
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

absl::StatusOr<std::vector<float>> CostModel::Predict(const std::vector<Config>& configs) {
  if (!can_predict()) return absl::FailedPreconditionError("no cost model yet");
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
  const bool use_own = own_model_.trained() && (!log_model_.trained() || fine_tuned_);
  std::vector<float> own, log;
  if (use_own) {
    ASSIGN_OR_RETURN(own, own_model_.Predict(rows));
  }
  if (log_model_.trained()) {
    ASSIGN_OR_RETURN(log, log_model_.Predict(rows));
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    if (row_of[i] == SIZE_MAX) continue;
    const size_t r = row_of[i];
    scores[i] = (use_own ? own[r] : 0.0f) + (log_model_.trained() ? log[r] : 0.0f);
    if (use_own && on_hardware_prior_)
      scores[i] += static_cast<float>(options_.hardware_prior_weight) * HardwarePrior(rows[r]);
  }
  return scores;
}

float CostModel::HardwarePrior(const costmodel::FeatureVector& f) const {
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

std::vector<float> CostModel::HardwarePriorOf(const std::vector<Config>& configs) {
  WarnIfPriorIncomplete();
  std::vector<float> prior;
  for (const costmodel::FeatureVector& f : OwnFeatures(configs))
    prior.push_back(f.empty() ? -INFINITY : HardwarePrior(f));
  return prior;
}

}  // namespace tuneforge
