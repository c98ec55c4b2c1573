// The nightly job: its spec file, the tuning runs and the deploy at the end.
#include "deploy/nightly.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/support/files.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/task/task_list.h"
#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

std::string Key(const std::string& task, const std::string& device) { return task + "|" + device; }

absl::Status SpecError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(path + ": " + what);
}

// `node` as a T, or an error naming the key, what it needs and what it got: yaml-cpp's
// own "bad conversion" says neither (trials: 1e11 is not an int).
template <typename T>
absl::StatusOr<T> Typed(const std::string& path, const YAML::Node& node, const std::string& key,
                        const std::string& what) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    std::string got = node.IsScalar() ? "'" + node.Scalar() + "'"
                      : node.IsSequence() ? std::string("a list")
                      : node.IsMap()      ? std::string("a mapping")
                                          : std::string("nothing");
    return SpecError(path, key + " must be " + what + ", got " + got);
  }
}

}  // namespace

absl::StatusOr<NightlySpec> LoadNightlySpec(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError("cannot read nightly spec " + path);
  } catch (const YAML::Exception& e) {
    return SpecError(path, std::string("not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) return SpecError(path, "expected a mapping of settings");
  static const std::set<std::string> kKeys = {
      "name", "db", "device_keys", "tasks", "tasks_files", "models", "trials", "time_limit_minutes",
      "regression_threshold", "canary"};
  NightlySpec spec;
  std::filesystem::path base = std::filesystem::absolute(path).parent_path();
  try {
    std::set<std::string> seen;
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      if (!kKeys.count(key)) return SpecError(path, "unknown key '" + key + "'");
      if (!seen.insert(key).second) return SpecError(path, "key '" + key + "' is given twice");
    }
    if (root["name"]) {
      ASSIGN_OR_RETURN(spec.name, Typed<std::string>(path, root["name"], "name", "a text"));
    }
    if (!root["db"]) return SpecError(path, "missing 'db' (the tuning log)");
    ASSIGN_OR_RETURN(std::string db, Typed<std::string>(path, root["db"], "db", "a file"));
    if (db.empty()) return SpecError(path, "db must name a file");
    spec.db = (base / db).lexically_normal().string();
    if (root["device_keys"]) {
      ASSIGN_OR_RETURN(spec.device_keys, Typed<std::vector<std::string>>(path, root["device_keys"], "device_keys", "a list of device keys"));
    }
    if (spec.device_keys.empty()) return SpecError(path, "'device_keys' is empty");
    if (root["tasks"]) {
      ASSIGN_OR_RETURN(auto tasks, Typed<std::vector<std::string>>(path, root["tasks"], "tasks", "a list of task texts"));
      for (const std::string& t : tasks) {
        absl::StatusOr<TuningTask> task = ParseTask(t);
        if (!task.ok()) return SpecError(path, std::string(task.status().message()));
        spec.tasks.push_back(task->CanonicalText());
      }
    }
    if (root["tasks_files"]) {
      ASSIGN_OR_RETURN(auto files, Typed<std::vector<std::string>>(path, root["tasks_files"], "tasks_files", "a list of files"));
      for (const std::string& f : files) {
        ASSIGN_OR_RETURN(std::vector<ScheduledTask> tasks, ReadTasksFile((base / f).string()));
        for (const ScheduledTask& t : tasks) spec.tasks.push_back(t.task_text);
      }
    }
    if (root["models"]) {
      // Every tuning task of each ONNX model (graph::ExtractTasks), as `tune --model`
      // would tune them; a model tuneforge cannot run is an error naming it.
      ASSIGN_OR_RETURN(auto models, Typed<std::vector<std::string>>(path, root["models"], "models", "a list of ONNX files"));
      for (const std::string& f : models) {
        const std::string model_path = (base / f).lexically_normal().string();
        absl::StatusOr<frontend::OnnxModel> model = frontend::ReadOnnxModel(model_path);
        absl::Status ok = model.ok() ? frontend::CheckSupported(*model) : model.status();
        absl::StatusOr<graph::Graph> g =
            ok.ok() ? graph::ImportOnnx(*model) : absl::StatusOr<graph::Graph>(ok);
        absl::StatusOr<graph::TaskTable> table =
            g.ok() ? graph::ExtractTasks(*g) : absl::StatusOr<graph::TaskTable>(g.status());
        if (!table.ok()) return SpecError(path, "model " + f + ": " + std::string(table.status().message()));
        if (table->tasks.empty()) return SpecError(path, "model " + f + " has no tunable task");
        NightlyModel m{f, model_path, {}};
        for (const graph::ExtractedTask& t : table->tasks) m.tasks.push_back(t.task);
        spec.models.push_back(std::move(m));
      }
    }
    {
      // A task named twice (by two tasks files, or a file and `tasks`) is tuned once,
      // and a task a model has is tuned in that model's job.
      std::set<std::string> seen;
      for (const NightlyModel& m : spec.models) seen.insert(m.tasks.begin(), m.tasks.end());
      std::vector<std::string> unique;
      for (const std::string& t : spec.tasks)
        if (seen.insert(t).second) unique.push_back(t);
      spec.tasks = std::move(unique);
    }
    if (spec.tasks.empty() && spec.models.empty()) {
      return SpecError(path, "no tasks (give 'tasks', 'tasks_files' or 'models')");
    }
    if (YAML::Node trials = root["trials"]) {
      if (!trials.IsMap()) return SpecError(path, "'trials' must be a mapping {new, converged}");
      for (const auto& kv : trials) {
        std::string k = kv.first.as<std::string>();
        if (k != "new" && k != "converged") return SpecError(path, "unknown key 'trials." + k + "'");
      }
      if (trials["new"]) {
        ASSIGN_OR_RETURN(spec.new_trials, Typed<int>(path, trials["new"], "trials.new", "an integer 1..100000"));
      }
      if (trials["converged"]) {
        ASSIGN_OR_RETURN(spec.converged_trials, Typed<int>(path, trials["converged"], "trials.converged", "an integer 0..100000"));
      }
    }
    if (root["time_limit_minutes"]) {
      ASSIGN_OR_RETURN(spec.time_limit_minutes, Typed<double>(path, root["time_limit_minutes"], "time_limit_minutes", "a number of minutes"));
    }
    if (root["regression_threshold"]) {
      ASSIGN_OR_RETURN(spec.regression_threshold, Typed<double>(path, root["regression_threshold"], "regression_threshold", "a number between 0 and 1"));
    }
    if (root["canary"]) {
      ASSIGN_OR_RETURN(spec.canary, Typed<bool>(path, root["canary"], "canary", "true or false"));
    }
  } catch (const YAML::Exception& e) {
    return SpecError(path, std::string("bad value: ") + e.what());
  }
  if (spec.new_trials < 1 || spec.new_trials > 100000 || spec.converged_trials < 0 ||
      spec.converged_trials > 100000) {
    return SpecError(path, "trials.new must be 1..100000 and trials.converged 0..100000");
  }
  if (!(spec.regression_threshold > 0 && spec.regression_threshold < 1)) {
    return SpecError(path, "regression_threshold must be between 0 and 1 (e.g. 0.1 = 10%)");
  }
  if (!(spec.time_limit_minutes >= 0) || !std::isfinite(spec.time_limit_minutes)) {
    return SpecError(path, "time_limit_minutes must be a finite number >= 0");
  }
  return spec;
}

bool NightlyReport::HasRegression() const {
  for (const NightlyTaskResult& t : tasks)
    if (t.regression || t.canary_slower) return true;
  return false;
}

void Classify(NightlyReport* report) {
  for (NightlyTaskResult& t : report->tasks) {
    t.canary_slower = t.canary_measured_gflops > 0 && t.canary_recorded_gflops > 0 &&
                      t.canary_measured_gflops < (1 - report->threshold) * t.canary_recorded_gflops;
    // A slower device explains a slower best; only a healthy canary makes it a
    // schedule regression.
    t.regression = !t.canary_slower && t.previous_gflops > 0 &&
                   t.best_gflops < (1 - report->threshold) * t.previous_gflops;
  }
}

std::vector<std::pair<std::string, double>> PreviousBest(const std::string& report_dir,
                                                         const std::string& exclude) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(report_dir, ec)) {
    if (entry.is_directory() && entry.path().string() != exclude &&
        std::filesystem::exists(entry.path() / "report.json"))
      dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<std::pair<std::string, double>> out;
  if (dirs.empty()) return out;
  absl::StatusOr<std::string> text = ReadFile(dirs.back() + "/report.json");
  if (!text.ok()) return out;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("tasks")) return out;
  for (const auto& t : j["tasks"]) {
    out.emplace_back(Key(t.value("task", ""), t.value("device_key", "")), t.value("best_gflops", 0.0));
  }
  return out;
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {
// A Markdown table cell: HTML-escaped (renderers pass HTML through) and '|' escaped.
std::string MdCell(const std::string& text) {
  std::string out;
  for (char c : XmlEscape(text)) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}
}  // namespace

std::string CurveSvg(const std::string& title, const std::vector<double>& curve) {
  const double w = 480, h = 240, left = 50, bottom = 30, top = 30, right = 10;
  double ymax = 0;
  for (double v : curve) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"18\">" << XmlEscape(title) << "</text>\n"
    << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\""
    << h - bottom << "\" stroke=\"black\"/>\n"
    << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
    << "\" stroke=\"black\"/>\n"
    << "<text x=\"4\" y=\"" << top + 4 << "\">" << absl::StrFormat("%.0f", ymax) << "</text>\n"
    << "<text x=\"4\" y=\"" << h - bottom << "\">0</text>\n"
    << "<text x=\"" << left << "\" y=\"" << h - 8 << "\">trial 1</text>\n"
    << "<text x=\"" << w - right - 60 << "\" y=\"" << h - 8 << "\">trial " << curve.size()
    << "</text>\n"
    << "<text x=\"" << left + 4 << "\" y=\"" << top + 12 << "\">best GFLOP/s so far</text>\n";
  if (!curve.empty()) {
    s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < curve.size(); ++i) {
      double x = left + (curve.size() == 1 ? 0 : (w - left - right) * i / (curve.size() - 1.0));
      double y = (h - bottom) - (h - bottom - top) * curve[i] / ymax;
      s << absl::StrFormat("%.1f,%.1f ", x, y);
    }
    s << "\"/>\n";
  }
  s << "</svg>\n";
  return s.str();
}

absl::Status WriteNightlyReport(const NightlyReport& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::ordered_json j = {{"name", r.name}, {"date", r.date}, {"threshold", r.threshold},
                              {"regression", r.HasRegression()}};
  if (r.log_models >= 0) j["log_models_trained"] = r.log_models;
  j["tasks"] = nlohmann::ordered_json::array();
  std::ostringstream md, rows, canary_md, canary_rows;
  md << "# " << MdCell(r.name) << " — " << MdCell(r.date) << "\n\n"
     << (r.HasRegression() ? "**REGRESSION FOUND** (threshold " : "No regression (threshold ")
     << absl::StrFormat("%.0f%%)", r.threshold * 100) << "\n\n"
     << "| task | device | status | trials | best GFLOP/s | previous | change | curve |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  canary_md << "\n## Canary (last night's best, re-measured first)\n\n"
            << "| task | device | recorded GFLOP/s | measured GFLOP/s | ratio | verdict |\n"
            << "|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < r.tasks.size(); ++i) {
    const NightlyTaskResult& t = r.tasks[i];
    std::string svg = "curve-" + std::to_string(i + 1) + ".svg";
    RETURN_IF_ERROR(WriteFile(dir + "/" + svg, CurveSvg(t.task + " on " + t.device_key, t.curve)));
    std::string change = t.previous_gflops > 0
                             ? absl::StrFormat("%+.1f%%", 100 * (t.best_gflops / t.previous_gflops - 1))
                             : "new";
    if (t.regression) change += " REGRESSION";
    md << "| " << MdCell(t.task) << " | " << MdCell(t.device_key) << " | " << MdCell(t.status)
       << " | " << t.trials << " | "
       << absl::StrFormat("%.2f", t.best_gflops) << " | "
       << (t.previous_gflops > 0 ? absl::StrFormat("%.2f", t.previous_gflops) : "-") << " | "
       << change << " | [svg](" << svg << ") |\n";
    rows << "<tr><td>" << XmlEscape(t.task) << "</td><td>" << XmlEscape(t.device_key)
         << "</td><td>" << XmlEscape(t.status)
         << "</td><td>" << t.trials << "</td><td>" << absl::StrFormat("%.2f", t.best_gflops)
         << "</td><td>" << change << "</td><td><img src=\"" << svg << "\" width=\"240\"></td></tr>\n";
    if (t.canary_measured_gflops > 0) {
      double ratio = t.canary_measured_gflops / t.canary_recorded_gflops;
      std::string verdict = t.canary_slower ? "SLOWER: device or toolchain regressed" : "ok";
      canary_md << "| " << MdCell(t.task) << " | " << MdCell(t.device_key) << " | "
                << absl::StrFormat("%.2f | %.2f | %.2f", t.canary_recorded_gflops,
                                   t.canary_measured_gflops, ratio)
                << " | " << verdict << " |\n";
      canary_rows << "<tr><td>" << XmlEscape(t.task) << "</td><td>" << XmlEscape(t.device_key)
                  << "</td><td>"
                  << absl::StrFormat("%.2f</td><td>%.2f</td><td>%.2f", t.canary_recorded_gflops,
                                     t.canary_measured_gflops, ratio)
                  << "</td><td>" << verdict << "</td></tr>\n";
    }
    j["tasks"].push_back({{"task", t.task}, {"device_key", t.device_key}, {"model", t.model}, {"job_id", t.job_id}, {"status", t.status},
                          {"trials", t.trials}, {"was_stale", t.was_stale},
                          {"best_gflops", t.best_gflops}, {"previous_gflops", t.previous_gflops},
                          {"canary_recorded_gflops", t.canary_recorded_gflops},
                          {"canary_measured_gflops", t.canary_measured_gflops},
                          {"canary_slower", t.canary_slower}, {"regression", t.regression},
                          {"curve", t.curve}});
  }
  RETURN_IF_ERROR(WriteFile(dir + "/report.md", md.str() + canary_md.str()));
  std::ostringstream html;
  html << "<!doctype html><html><head><meta charset=\"utf-8\"><title>" << XmlEscape(r.name)
       << " " << XmlEscape(r.date)
       << "</title><style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px}"
       << "table{border-collapse:collapse}</style></head><body>\n<h1>" << XmlEscape(r.name)
       << " — " << XmlEscape(r.date)
       << "</h1>\n<p>" << (r.HasRegression() ? "<b>REGRESSION FOUND</b>" : "No regression")
       << absl::StrFormat(" (threshold %.0f%%)", r.threshold * 100) << "</p>\n"
       << "<table><tr><th>task</th><th>device</th><th>status</th><th>trials</th>"
       << "<th>best GFLOP/s</th><th>change</th><th>curve</th></tr>\n"
       << rows.str() << "</table>\n<h2>Canary</h2>\n<table><tr><th>task</th><th>device</th>"
       << "<th>recorded</th><th>measured</th><th>ratio</th><th>verdict</th></tr>\n"
       << canary_rows.str() << "</table>\n</body></html>\n";
  RETURN_IF_ERROR(WriteFile(dir + "/report.html", html.str()));
  return WriteFile(dir + "/report.json", j.dump(2));
}

}  // namespace tuneforge
