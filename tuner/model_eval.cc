// Offline evaluation of the cost model on held-out records (bench search).
#include "tuner/model_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "compiler/support/hash.h"
#include "compiler/support/status.h"

namespace tuneforge {

absl::StatusOr<HeldOutResult> EvaluateHeldOut(const PolicyContext& context,
                                              const ModelPolicyOptions& options,
                                              const std::vector<TuningRecord>& records,
                                              const std::vector<TuningRecord>& transfer,
                                              const HeldOutOptions& held_out, bool own_train) {
  // Distinct configs of the task, best record of each.
  std::map<std::string, const TuningRecord*> best;
  for (const TuningRecord& r : records) {
    if (r.workload.key != context.task.WorkloadKey()) continue;
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (!c.ok()) continue;
    const TuningRecord*& slot = best[c->ToJson()];
    if (!slot || RecordThroughput(r) > RecordThroughput(*slot)) slot = &r;
  }
  if (best.size() < 8)
    return absl::InvalidArgumentError("only " + std::to_string(best.size()) +
                                      " distinct configs of " + context.task.CanonicalText());
  // Order by a hash of (seed, config): a split that does not depend on the standard
  // library's shuffle, so it is the same on every machine. The seed goes first: with
  // FNV-1a a seed appended last only rotates the order of all keys, and seeds 1, 2, 3
  // then gave the same split.
  std::vector<std::pair<uint64_t, const TuningRecord*>> order;
  for (const auto& [key, r] : best)
    order.emplace_back(Fnv1a64(std::to_string(held_out.split_seed) + "#" + key), r);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t n_train = static_cast<size_t>(order.size() * held_out.train_fraction);
  n_train = std::clamp<size_t>(n_train, 1, order.size() - 1);

  std::vector<TuningRecord> train;
  std::vector<Config> test;
  std::vector<float> labels;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i < n_train) {
      train.push_back(*order[i].second);
    } else {
      test.push_back(*Config::FromJson(order[i].second->config_json));
      labels.push_back(static_cast<float>(RecordThroughput(*order[i].second)));
    }
  }
  ModelPolicy policy(context, options);
  policy.ObserveOtherTasks(transfer);
  if (own_train) policy.Observe(train);
  RETURN_IF_ERROR(policy.cost_model().Update());
  if (!policy.cost_model().can_predict())
    return absl::InvalidArgumentError("too few rows to train the cost model");
  ASSIGN_OR_RETURN(std::vector<float> scores, policy.cost_model().Predict(test));

  HeldOutResult out;
  out.train = own_train ? static_cast<int>(n_train) : 0;
  out.test = static_cast<int>(test.size());
  out.transfer_rows = policy.cost_model().rows() - out.train;
  out.k = std::clamp(out.test / 5, 1, held_out.max_k);
  out.pairwise_accuracy = costmodel::PairwiseAccuracy(scores, labels);
  out.recall_at_k = costmodel::RecallAtK(scores, labels, out.k);
  out.train_seconds = policy.cost_model().last_train_seconds();
  return out;
}

absl::StatusOr<SimulatedSearch> SimulateTrialsTo95(const PolicyContext& context,
                                                   const ModelPolicyOptions& options,
                                                   const std::vector<TuningRecord>& pool,
                                                   const std::vector<TuningRecord>& others,
                                                   const SimulateOptions& simulate) {
  if (simulate.batch < 1) return absl::InvalidArgumentError("batch must be at least 1");
  if (simulate.bar_rank < 1) return absl::InvalidArgumentError("bar_rank must be at least 1");
  // Distinct configs in the pool's order, each with its best throughput.
  std::vector<Config> configs;
  std::vector<TuningRecord> records;  // one per config, its best
  std::map<std::string, size_t> index;
  for (const TuningRecord& r : pool) {
    if (r.workload.key != context.task.WorkloadKey()) continue;
    absl::StatusOr<Config> c = Config::FromJson(r.config_json);
    if (!c.ok()) continue;
    auto [it, fresh] = index.emplace(c->ToJson(), records.size());
    if (fresh) {
      configs.push_back(*std::move(c));
      records.push_back(r);
    } else if (RecordThroughput(r) > RecordThroughput(records[it->second])) {
      records[it->second] = r;
    }
  }
  if (configs.size() < 2)
    return absl::InvalidArgumentError("only " + std::to_string(configs.size()) + " distinct configs of " +
                                      context.task.CanonicalText());
  if (static_cast<size_t>(simulate.bar_rank) > configs.size())
    return absl::InvalidArgumentError("bar rank " + std::to_string(simulate.bar_rank) + " but only " +
                                      std::to_string(configs.size()) + " distinct configs of " +
                                      context.task.CanonicalText());
  SimulatedSearch out;
  std::vector<double> fastest;
  for (const TuningRecord& r : records) fastest.push_back(RecordThroughput(r));
  std::sort(fastest.begin(), fastest.end(), std::greater<>());
  out.best = fastest.front();
  out.bar = fastest[simulate.bar_rank - 1];
  const double bar = out.bar;
  if (out.best <= 0) return absl::InvalidArgumentError("no config of the pool ran");
  if (bar <= 0)
    return absl::InvalidArgumentError("bar rank " + std::to_string(simulate.bar_rank) +
                                      " but fewer configs of the pool ran");
  for (double t : fastest) out.within += t >= 0.95 * bar;
  out.configs = static_cast<int>(configs.size());
  out.random_expected = (static_cast<double>(out.configs) + 1) / (out.within + 1);

  const ConfigSpace space = context.tmpl->Space(context.task, context.target);
  ModelPolicy policy(context, options);
  if (!others.empty()) policy.ObserveOtherTasks(others);
  std::vector<size_t> left(configs.size());  // indices into configs, not measured yet
  std::iota(left.begin(), left.end(), 0);
  std::mt19937_64 rng(context.seed);
  std::shuffle(left.begin(), left.end(), rng);
  std::vector<size_t> next;
  const size_t per_batch = static_cast<size_t>(simulate.batch);
  // Moves up to `n` of the first scores.size() configs of `left` into `next`: the
  // best-scored first, no two closer than min_knob_distance knobs while others remain.
  auto take_best = [&](const std::vector<float>& scores, size_t n) {
    std::vector<size_t> order(scores.size());  // positions in `left`, best score first
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    std::vector<const Config*> ranked;
    for (size_t o : order) ranked.push_back(&configs[left[o]]);
    std::vector<bool> picked(left.size());
    std::vector<Config> batch_configs;
    DiversePicker picker(space, options.min_knob_distance);
    next.clear();
    while (next.size() < n) {
      std::optional<size_t> r = picker.Next(ranked, batch_configs, [&](size_t i) { return picked[order[i]]; });
      if (!r) break;
      picked[order[*r]] = true;
      next.push_back(left[order[*r]]);
      batch_configs.push_back(configs[left[order[*r]]]);
    }
    std::vector<size_t> rest;
    for (size_t o = 0; o < left.size(); ++o)
      if (!picked[o]) rest.push_back(left[o]);
    left = std::move(rest);
  };
  if (!policy.cost_model().can_predict()) {
    // No log model: the first batch at random, or, as ModelPolicy::Propose does, the
    // hardware prior's best of prior_pool x batch random draws (of the pool's configs).
    const size_t n = std::min(per_batch, left.size());
    const size_t draws = std::min(left.size(), n * static_cast<size_t>(std::max(1, options.prior_pool)));
    std::vector<Config> drawn;
    for (size_t i = 0; i < draws; ++i) drawn.push_back(configs[left[i]]);
    take_best(options.prior_pool > 0 ? policy.cost_model().HardwarePriorOf(drawn) : std::vector<float>(draws, 0.0f), n);
  }
  while (true) {
    std::vector<TuningRecord> measured;
    for (size_t i : next) {
      ++out.trials;
      if (RecordThroughput(records[i]) >= 0.95 * bar) return out;
      measured.push_back(records[i]);
    }
    if (left.empty()) return out;
    policy.Observe(measured);
    RETURN_IF_ERROR(policy.cost_model().Update());
    std::vector<Config> candidates;
    for (size_t i : left) candidates.push_back(configs[i]);
    ASSIGN_OR_RETURN(std::vector<float> scores, policy.cost_model().Predict(candidates));
    take_best(scores, per_batch);
    if (next.empty()) return out;  // (the picker takes every config when short)
  }
}

absl::StatusOr<ScoringSpeed> MeasureScoringSpeed(const PolicyContext& context,
                                                 const ModelPolicyOptions& options,
                                                 const std::vector<TuningRecord>& records,
                                                 int candidates) {
  ModelPolicy policy(context, options);
  policy.Observe(records);
  RETURN_IF_ERROR(policy.cost_model().Update());
  if (!policy.cost_model().own_model().trained())
    return absl::InvalidArgumentError("too few records to train the cost model");
  ConfigSpace space = context.tmpl->Space(context.task, context.target);
  std::mt19937_64 rng(context.seed);
  auto sample = [&](int n) {
    std::vector<Config> out;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<Config> c = space.Sample(rng, 1000);
      if (c.ok()) out.push_back(*std::move(c));
    }
    return out;
  };
  using Clock = std::chrono::steady_clock;
  auto us_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  // The breakdown is in this thread's CPU time: on a shared machine wall time mostly
  // measures the other processes.
  auto thread_cpu_us = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
  };
  ScoringSpeed out;
  std::vector<Config> configs = sample(candidates);
  if (configs.empty()) return absl::InvalidArgumentError("cannot sample configs");
  out.candidates = static_cast<int>(configs.size());
  costmodel::FeatureExtractor extractor(space, context.target);
  std::vector<costmodel::FeatureVector> rows;
  rows.reserve(configs.size());
  // In chunks, as Score holds them: thousands of lowered functions alive at once would
  // time the memory they take (page faults) rather than the lowering.
  double lower_us = 0, extract_us = 0;
  constexpr size_t kChunk = 256;
  for (size_t begin = 0; begin < configs.size(); begin += kChunk) {
    const size_t end = std::min(configs.size(), begin + kChunk);
    std::vector<ir::LoweredFunc> funcs;
    funcs.reserve(end - begin);
    double c0 = thread_cpu_us();
    for (size_t i = begin; i < end; ++i) {
      ASSIGN_OR_RETURN(ir::LoweredFunc f, context.tmpl->InstantiateKernel(context.task, context.target, configs[i]));
      funcs.push_back(std::move(f));
    }
    lower_us += thread_cpu_us() - c0;
    c0 = thread_cpu_us();
    for (size_t i = begin; i < end; ++i) rows.push_back(extractor.Extract(funcs[i - begin], configs[i]));
    extract_us += thread_cpu_us() - c0;
  }
  out.lower_us = lower_us / configs.size();
  out.extract_us = extract_us / configs.size();
  double c0 = thread_cpu_us();
  ASSIGN_OR_RETURN(std::vector<float> predicted, policy.cost_model().own_model().Predict(rows));
  out.predict_us = (thread_cpu_us() - c0) / configs.size();
  std::vector<Config> fresh = sample(candidates);
  std::clock_t cpu0 = std::clock();
  Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(std::vector<float> scores, policy.cost_model().Predict(fresh));
  out.score_candidates_per_second = fresh.size() / (us_since(t0) * 1e-6);
  out.score_cpu_us = 1e6 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC / fresh.size();
  out.scoring_threads = options.cost_model.scoring_threads;
  return out;
}

}  // namespace tuneforge
