// Log models: a cost model per (op, target) trained on the whole db.
#include "tuner/log_model.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "costmodel/features.h"
#include "nlohmann/json.hpp"
#include "tuner/model_store.h"
#include "tuner/tuning_loop.h"

namespace tuneforge {

std::string LogModelInfo::ToJson() const {
  return nlohmann::json{{"key", key},
                        {"op", op},
                        {"template", template_name},
                        {"template_version", template_version},
                        {"target_key", target_key},
                        {"records", records},
                        {"tasks", tasks},
                        {"log_records", log_records},
                        {"train_seconds", train_seconds},
                        {"trained_unix_us", trained_unix_us},
                        {"max_depth", max_depth},
                        {"dropped", dropped}}
      .dump();
}

int64_t LogModelInfo::dropped_total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : dropped) n += count;
  return n;
}

absl::StatusOr<LogModelInfo> LogModelInfo::FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError("log model info is not a JSON object");
  LogModelInfo i;
  try {
    i.key = j.at("key").get<std::string>();
    i.op = j.at("op").get<std::string>();
    i.template_name = j.at("template").get<std::string>();
    i.template_version = j.at("template_version").get<int>();
    i.target_key = j.at("target_key").get<std::string>();
    i.records = j.at("records").get<int64_t>();
    i.tasks = j.at("tasks").get<int>();
    i.log_records = j.at("log_records").get<int64_t>();
    i.train_seconds = j.at("train_seconds").get<double>();
    i.trained_unix_us = j.at("trained_unix_us").get<int64_t>();
    i.max_depth = j.value("max_depth", 0);
    if (j.contains("dropped")) i.dropped = j.at("dropped").get<std::map<std::string, int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(std::string("log model info: ") + e.what());
  }
  return i;
}

int LogModelDepth(const ConfigSpace& space, const LogModelOptions& options) {
  return space.knob_features() ? options.knob_features_max_depth : options.xgb.max_depth;
}

absl::StatusOr<std::string> TrainLogModel(const Template& tmpl, const Target& target,
                                          const std::vector<TuningRecord>& records,
                                          const LogModelOptions& options, LogModelInfo* info) {
  auto start = std::chrono::steady_clock::now();
  // Per workload: its task, feature extractor (knob indices are relative to the task's
  // own space, as the policy computes them) and rows. Newest records first.
  struct Group {
    std::optional<TuningTask> task;
    std::optional<costmodel::FeatureExtractor> extractor;
    std::vector<costmodel::FeatureVector> rows;
    std::vector<double> throughput;
  };
  std::map<std::string, Group> groups;
  std::map<std::string, int64_t> dropped;
  int64_t used = 0;
  for (auto it = records.rbegin(); it != records.rend() && used < options.max_records; ++it) {
    const TuningRecord& r = *it;
    if (r.template_name != tmpl.name() || r.template_version != tmpl.version() ||
        r.target.key != target.Key() || r.UntrustedUpload() ||
        r.workload.key == options.exclude_workload)
      continue;
    Group& g = groups[r.workload.key];
    if (!g.task) {
      absl::StatusOr<TuningTask> task = ParseTask(r.workload.task_text);
      if (!task.ok()) {
        ++dropped["task does not parse"];
        continue;
      }
      g.task = *std::move(task);
      g.extractor.emplace(tmpl.Space(*g.task, target), target, options.features);
    }
    absl::StatusOr<Config> config = Config::FromJson(r.config_json);
    if (!config.ok()) {
      ++dropped["config does not parse"];
      continue;
    }
    absl::StatusOr<ir::LoweredFunc> func = tmpl.InstantiateKernel(*g.task, target, *config);
    if (!func.ok()) {
      ++dropped["config does not build"];
      continue;
    }
    g.rows.push_back(g.extractor->Extract(*func, *config));
    g.throughput.push_back(RecordThroughput(r));
    ++used;
  }
  std::vector<costmodel::FeatureVector> rows;
  std::vector<float> labels;
  std::vector<unsigned> sizes;
  int tasks = 0;
  for (auto& [key, g] : groups) {
    if (g.rows.size() < 2) {  // one record ranks nothing
      dropped["alone in its workload"] += static_cast<int64_t>(g.rows.size());
      continue;
    }
    if (!rows.empty() && g.rows[0].size() != rows[0].size()) {
      TF_LOG(Warning) << "log model: " << g.task->CanonicalText()
                      << " has a different knob set; left out";
      dropped["another knob set"] += static_cast<int64_t>(g.rows.size());
      continue;
    }
    rows.insert(rows.end(), g.rows.begin(), g.rows.end());
    AppendRankLabels(g.throughput, &labels);
    sizes.push_back(static_cast<unsigned>(g.rows.size()));
    ++tasks;
  }
  if (static_cast<int>(rows.size()) < options.min_records)
    return absl::InvalidArgumentError("only " + std::to_string(rows.size()) + " usable records of " +
                                      tmpl.name() + " on " + target.Key() + " (need " +
                                      std::to_string(options.min_records) + ")");
  costmodel::XgbParams params = options.xgb;
  // Every group's space has the same knob set (checked above); the first one's says.
  for (const auto& [key, g] : groups) {
    if (g.task) {
      params.max_depth = LogModelDepth(*SpaceOf(tmpl, *g.task, target), options);
      break;
    }
  }
  costmodel::XgbModel model(params);
  RETURN_IF_ERROR(model.Train(rows, labels, sizes));
  ASSIGN_OR_RETURN(std::string bytes, model.SaveToBytes());
  if (info) {
    info->key = LogModelKey(tmpl.name(), tmpl.version(), target.Key());
    info->template_name = tmpl.name();
    info->template_version = tmpl.version();
    info->target_key = target.Key();
    info->records = static_cast<int64_t>(rows.size());
    info->tasks = tasks;
    info->train_seconds = SecondsSince(start);
    info->max_depth = params.max_depth;
    for (const auto& [reason, count] : dropped)
      if (count > 0) info->dropped[reason] = count;
    info->trained_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  }
  return bytes;
}

absl::StatusOr<std::optional<LogModelInfo>> StoredLogModelInfo(Database* db,
                                                               const std::string& key) {
  ASSIGN_OR_RETURN(std::optional<std::string> text, db->LoadModel(key + ".info"));
  if (!text) return std::optional<LogModelInfo>();
  ASSIGN_OR_RETURN(LogModelInfo info, LogModelInfo::FromJson(*text));
  return std::optional<LogModelInfo>(std::move(info));
}

absl::StatusOr<LogModelRefreshResult> RefreshLogModels(Database* db,
                                                       const LogModelRefresh& options) {
  // (op, target) pairs and their record counts, from the db's summary.
  struct Pair {
    std::string op;
    TargetInfo target;
    std::vector<std::string> workloads;
    std::string task_text;  // any workload's, to find the op's template
    int64_t records = 0;
  };
  std::map<std::pair<std::string, std::string>, Pair> pairs;
  ASSIGN_OR_RETURN(std::vector<WorkloadSummary> list, db->List());
  for (const WorkloadSummary& w : list) {
    if (!options.op.empty() && w.workload.op != options.op) continue;
    if (!options.target_key.empty() && w.target.key != options.target_key) continue;
    Pair& p = pairs[{w.workload.op, w.target.key}];
    p.op = w.workload.op;
    p.target = w.target;
    p.workloads.push_back(w.workload.key);
    p.task_text = w.workload.task_text;
    p.records += w.records;
  }
  LogModelRefreshResult out;
  for (const auto& [id, p] : pairs) {
    const std::string where = p.op + " on " + p.target.key;
    absl::StatusOr<TuningTask> task = ParseTask(p.task_text);
    absl::StatusOr<const Template*> tmpl =
        task.ok() ? FindTemplate(*task) : absl::StatusOr<const Template*>(task.status());
    if (!tmpl.ok()) {
      out.skipped.push_back(where + ": no template (" + std::string(tmpl.status().message()) + ")");
      continue;
    }
    Target target = TargetOfRecord(p.target);
    std::string key = LogModelKey((*tmpl)->name(), (*tmpl)->version(), target.Key());
    if (options.only_stale) {
      ASSIGN_OR_RETURN(std::optional<LogModelInfo> stored, StoredLogModelInfo(db, key));
      if (stored) {
        int64_t fresh = p.records - stored->log_records;
        if (fresh < options.min_new_records ||
            fresh < options.min_new_fraction * static_cast<double>(stored->log_records)) {
          out.skipped.push_back(where + ": up to date (" + std::to_string(fresh) +
                                " new records since it was trained)");
          continue;
        }
      }
    }
    std::vector<TuningRecord> records;
    for (const std::string& w : p.workloads) {
      ASSIGN_OR_RETURN(std::vector<TuningRecord> rs, db->Records(w, p.target.key));
      records.insert(records.end(), std::make_move_iterator(rs.begin()),
                     std::make_move_iterator(rs.end()));
    }
    // Commit order (newest last), so max_records keeps the newest.
    std::sort(records.begin(), records.end(),
              [](const TuningRecord& a, const TuningRecord& b) { return a.id < b.id; });
    LogModelInfo info;
    absl::StatusOr<std::string> bytes = TrainLogModel(**tmpl, target, records, options.model, &info);
    if (!bytes.ok()) {
      out.skipped.push_back(where + ": " + std::string(bytes.status().message()));
      continue;
    }
    info.op = p.op;
    info.log_records = p.records;
    RETURN_IF_ERROR(db->SaveModel(key, *bytes));
    RETURN_IF_ERROR(db->SaveModel(key + ".info", info.ToJson()));
    out.trained.push_back(std::move(info));
  }
  return out;
}

}  // namespace tuneforge
