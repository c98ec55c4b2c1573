// The JSON the CLI prints for a job's results.
#include "server/job_json.h"

namespace tuneforge {

double InRunFactor(const v1::TaskProgress& t) { return t.in_run_factor() > 0 ? t.in_run_factor() : 1.0; }

nlohmann::json BestJson(const v1::BestResult& b) {
  nlohmann::json config = nlohmann::json::parse(b.config_json(), nullptr, false);
  if (config.is_discarded()) config = b.config_json();  // never "<discarded>" in the output
  return {{"config", config}, {"gflops", b.gflops()}, {"seconds", b.seconds()},
          {"record_id", b.record_id()}};
}

nlohmann::json JobStatusJson(const v1::JobStatus& s) {
  nlohmann::json out = {{"job_id", s.job_id()},
                        {"state", v1::JobState_Name(s.state())},
                        {"message", s.message()},
                        {"last_event", s.last_event()},
                        {"task", s.task()},
                        {"trials", s.spec().trials()},
                        {"trials_done", s.trials_done()},
                        {"elapsed_seconds", s.elapsed_seconds()},
                        {"warnings", nlohmann::json::array()}};
  for (const std::string& w : s.warnings()) out["warnings"].push_back(w);
  if (s.best().seconds() > 0) out["best"] = BestJson(s.best());
  if (s.spec().tasks_size() > 0) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const v1::TaskProgress& t : s.tasks()) {
      nlohmann::json j = {{"task", t.task()},   {"weight", t.weight()}, {"trials", t.trials()},
                          {"rounds", t.rounds()}, {"flat", t.flat()},     {"error", t.error()},
                          {"in_run_factor", InRunFactor(t)}};
      if (t.best().seconds() > 0) j["best"] = BestJson(t.best());
      tasks.push_back(j);
    }
    out["tasks"] = tasks;
    out["round_trials"] = s.spec().round_trials();
    if (!s.spec().model_hash().empty()) {
      out["model"] = {{"name", s.spec().model_name()}, {"sha256", s.spec().model_hash()}};
      const v1::ModelTiming& m = s.model_timing();
      nlohmann::json timing = {{"timed", m.timed()}};
      if (m.timed()) {
        timing["untuned_seconds"] = m.untuned_seconds();
        timing["leftover_seconds"] = m.leftover_seconds();
        timing["in_runs"] = m.in_runs();
        if (m.in_runs() > 0) {
          timing["measured_seconds"] = m.measured_seconds();
          timing["measured_runs"] = m.measured_runs();
          timing["measured_when"] = m.measured_when();
          timing["estimated_before_seconds"] = m.estimated_before_seconds();
        }
      } else {
        timing["reason"] = m.not_timed_reason();
      }
      out["model"]["timing"] = timing;
    }
    out["estimated_seconds"] = s.estimated_seconds() > 0 ? nlohmann::json(s.estimated_seconds()) : nlohmann::json();
  }
  return out;
}

}  // namespace tuneforge
