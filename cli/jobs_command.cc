// `tuneforge jobs list|show|watch|cancel`: a server's jobs, for a client that
// submitted one and left (`tune --detach`) or for anyone following the farm.

#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "server/job_json.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"
#include "tuneforge/v1/farm.pb.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kJobsUsage =
    "usage: tuneforge jobs list|show ID|watch ID|cancel ID --server HOST:PORT\n"
    "                      [--token-file FILE] [--tls-ca FILE] [--json]\n"
    "  list    the server's jobs you may see (an admin sees all): id, state, trials done\n"
    "          of the budget, owner, task (a job of several: their count and the first)\n"
    "  show    one job: state, trials, best; for a job of several tasks (tune --model or\n"
    "          --tasks with --detach) each task's weight, trials, rounds and best, and the\n"
    "          estimated latency (weight x in-run factor x best, summed, plus the\n"
    "          leftovers when the server timed the model on its own CPU)\n"
    "  watch   follows the job to its end, one line per progress event on stderr; when\n"
    "          the server restarts it re-attaches (the job resumes under its id). Exits\n"
    "          0 when the job succeeded, 1 when it failed or was cancelled. Ctrl-C stops\n"
    "          watching, not the job\n"
    "  cancel  cancels the job (its owner's or an admin's token)\n"
    "  --json  show, watch: the job as JSON (watch: at its end); list: a JSON array\n";

// 12.3 us, 4.56 ms, 1.234 s.
std::string FormatLatency(double seconds) {
  if (seconds < 1e-3) return absl::StrFormat("%.1f us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.2f ms", seconds * 1e3);
  return absl::StrFormat("%.3f s", seconds);
}

void PrintStatus(const v1::JobStatus& s) {
  std::printf("job:         %s\n", s.job_id().c_str());
  std::printf("state:       %s%s%s\n", v1::JobState_Name(s.state()).c_str(), s.message().empty() ? "" : ": ",
              s.message().c_str());
  if (s.spec().tasks_size() == 0) {
    std::printf("task:        %s\n", s.task().c_str());
  } else {
    if (!s.spec().model_hash().empty())
      std::printf("model:       %s (sha256 %s)\n", s.spec().model_name().c_str(), s.spec().model_hash().c_str());
    std::printf("tasks:       %d, rounds of %d trials\n", s.spec().tasks_size(),
                s.spec().round_trials() > 0 ? s.spec().round_trials() : 32);
  }
  std::printf("trials:      %d of %d\n", s.trials_done(), s.spec().trials());
  std::printf("elapsed:     %.1f s\n", s.elapsed_seconds());
  if (!s.last_event().empty()) std::printf("last event:  %s\n", s.last_event().c_str());
  if (s.best().seconds() > 0) {
    std::printf("best:        %.2f GFLOP/s (%s) %s\n", s.best().gflops(), FormatLatency(s.best().seconds()).c_str(),
                s.best().config_json().c_str());
  }
  if (s.spec().tasks_size() > 0) {
    std::printf("%3s  %-48s %6s %6s %6s %12s %8s %6s\n", "#", "task", "weight", "trials", "rounds", "best",
                "GFLOP/s", "in run");
    for (int i = 0; i < s.tasks_size(); ++i) {
      const v1::TaskProgress& t = s.tasks(i);
      const bool has = t.best().seconds() > 0;
      std::printf("%3d  %-48s %6g %6d %6d %12s %8s %6s%s%s\n", i + 1, t.task().c_str(), t.weight(), t.trials(),
                  t.rounds(), has ? FormatLatency(t.best().seconds()).c_str() : "-",
                  has ? absl::StrFormat("%.1f", t.best().gflops()).c_str() : "-",
                  absl::StrFormat("%.2fx", InRunFactor(t)).c_str(),
                  t.flat() ? "  flat" : "", t.error().empty() ? "" : ("  last round failed: " + t.error()).c_str());
    }
    const v1::ModelTiming& m = s.model_timing();
    if (s.estimated_seconds() > 0) {
      std::printf("estimated:   %s (%s)\n", FormatLatency(s.estimated_seconds()).c_str(),
                  m.timed() ? "weight x in-run factor x best, summed, + leftovers" : "sum of weight x best latency");
    }
    if (m.timed()) {
      std::printf("leftovers:   %s (operators that are no task; the whole model untuned %s)\n",
                  FormatLatency(m.leftover_seconds()).c_str(), FormatLatency(m.untuned_seconds()).c_str());
      if (m.in_runs() > 0) {
        std::printf("model run:   %s with the best schedules %s on the server (median of %d runs); the estimate "
                    "before it %s\n",
                    FormatLatency(m.measured_seconds()).c_str(), m.measured_when().c_str(), m.measured_runs(),
                    FormatLatency(m.estimated_before_seconds()).c_str());
      }
    } else if (!s.spec().model_hash().empty() && !m.not_timed_reason().empty()) {
      std::printf("model run:   not timed: %s\n", m.not_timed_reason().c_str());
    }
  }
  for (const std::string& w : s.warnings()) std::printf("warning:     %s\n", w.c_str());
}

absl::StatusOr<int> ListJobs(const Flags& flags, const std::string& token) {
  ASSIGN_OR_RETURN(const v1::FarmStatus status,
                   FetchFarmStatus(flags.Get("server"), token, flags.Get("tls-ca"), "listing the jobs"));
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const v1::JobSummary& j : status.jobs()) {
      out.push_back({{"job_id", j.job_id()}, {"owner", j.owner()}, {"state", j.state()}, {"task", j.task()},
                     {"trials_done", j.trials_done()}, {"trials", j.trials()}, {"message", j.message()}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%-24s %-10s %13s %-12s %s\n", "job", "state", "trials", "owner", "task");
  for (const v1::JobSummary& j : status.jobs()) {
    std::printf("%-24s %-10s %6d of %-3d %-12s %s\n", j.job_id().c_str(), j.state().c_str(), j.trials_done(),
                j.trials(), j.owner().empty() ? "-" : j.owner().c_str(), j.task().c_str());
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> JobsCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca"}, {"json", "help"}));
  if (flags.Has("help")) {
    std::fputs(kJobsUsage, stdout);
    return 0;
  }
  const std::vector<std::string>& pos = flags.positional();
  const std::string verb = pos.empty() ? "" : pos[0];
  if (verb != "list" && verb != "show" && verb != "watch" && verb != "cancel") {
    return absl::InvalidArgumentError("expected: jobs list|show ID|watch ID|cancel ID --server HOST:PORT (see --help)");
  }
  if (verb == "list" ? pos.size() != 1 : pos.size() != 2) {
    return absl::InvalidArgumentError(verb == "list" ? "jobs list takes no job id"
                                                     : "jobs " + verb + " takes one job id, e.g. jobs " + verb +
                                                           " job-123-1 --server HOST:PORT");
  }
  RETURN_IF_ERROR(flags.Require("server"));
  ASSIGN_OR_RETURN(std::string token, TokenFromFlag(flags.Get("token-file")));
  if (verb == "list") return ListJobs(flags, token);
  const std::string& id = pos[1];
  ASSIGN_OR_RETURN(std::unique_ptr<TuningClient> client,
                   TuningClient::Connect(flags.Get("server"), token, flags.Get("tls-ca")));
  const bool json = flags.Has("json");
  if (verb == "cancel") {
    ASSIGN_OR_RETURN(v1::JobStatus before, client->Get(id));  // a clear error for an unknown id
    RETURN_IF_ERROR(client->Cancel(id));
    if (json) {
      std::printf("%s\n", nlohmann::json{{"job_id", id}, {"cancel_requested", true}}.dump().c_str());
    } else {
      std::printf("job %s: cancel requested (it was %s)\n", id.c_str(), v1::JobState_Name(before.state()).c_str());
    }
    return 0;
  }
  v1::JobStatus status;
  if (verb == "show") {
    ASSIGN_OR_RETURN(status, client->Get(id));
  } else {
    ASSIGN_OR_RETURN(status, client->Get(id));  // an unknown id fails here, not after the reconnect wait
    std::string printed;
    ASSIGN_OR_RETURN(status, client->Wait(id, [&](const v1::JobStatus& s) {
      if (s.last_event() != printed && !s.last_event().empty()) {
        printed = s.last_event();
        std::fprintf(stderr, "[%6.1fs] %d/%d trials: %s\n", s.elapsed_seconds(), s.trials_done(), s.spec().trials(),
                     printed.c_str());
      }
    }));
  }
  if (json) {
    std::printf("%s\n", JobStatusJson(status).dump().c_str());
  } else {
    PrintStatus(status);
  }
  if (verb == "watch") return status.state() == v1::SUCCEEDED ? 0 : 1;
  return 0;
}

}  // namespace tuneforge::cli
