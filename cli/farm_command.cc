// `tuneforge farm status`: agents (key, state, last heartbeat, measurements, error
// rate) and jobs (owner, state, progress, trials/s) of a running server.
// `tuneforge farm agents`: each agent's target and launcher.

#include <chrono>
#include <cstdio>

#include "compiler/support/status.h"
#include "nlohmann/json.hpp"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tuneforge/v1/farm.pb.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kFarmUsage =
    "usage: tuneforge farm status|agents --server HOST:PORT [--token-file FILE]\n"
    "                       [--tls-ca FILE] [--json]\n"
    "  agents: one line per agent: device key, state, the target its key's jobs compile\n"
    "  for, and how it reaches its device (launcher; \"-\" = it measures its own CPU).\n"
    "  status:\n"
    "  Lists the server's agents (device key, the triple it measures: a device agent\n"
    "  reports its device's, and its cpu_model names the launcher; state idle/busy/draining/quarantined/\n"
    "  lost with the reason, last heartbeat, measurements, error rate, golden-kernel\n"
    "  time), the MeasureRequests queued and leased, and its jobs (owner, priority,\n"
    "  state, progress, trials/s).\n";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<int> FarmCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca"}, {"json", "help"}));
  if (flags.Has("help")) {
    std::fputs(kFarmUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1 ||
      (flags.positional()[0] != "status" && flags.positional()[0] != "agents")) {
    return absl::InvalidArgumentError("expected: farm status|agents --server HOST:PORT (see --help)");
  }
  const bool agents_only = flags.positional()[0] == "agents";
  RETURN_IF_ERROR(flags.Require("server"));
  ASSIGN_OR_RETURN(std::string token, TokenFromFlag(flags.Get("token-file")));
  ASSIGN_OR_RETURN(const v1::FarmStatus status,
                   FetchFarmStatus(flags.Get("server"), token, flags.Get("tls-ca"), "farm status"));

  if (flags.Has("json")) {
    nlohmann::json out = {{"agents", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}};
    for (const v1::AgentStatus& a : status.agents()) {
      out["agents"].push_back(
          {{"agent_id", a.agent_id()}, {"device_key", a.device_key()}, {"state", a.state()},
           {"hostname", a.hostname()}, {"cpu_model", a.cpu_model()}, {"triple", a.triple()}, {"cores", a.cores()},
           {"in_flight", a.in_flight()}, {"measurements", a.measurements()},
           {"errors", a.errors()},
           {"error_rate", a.measurements() ? double(a.errors()) / a.measurements() : 0.0},
           {"last_heartbeat_unix_ms", a.last_heartbeat_unix_ms()},
           {"state_reason", a.state_reason()}, {"workers", a.workers()},
           {"golden_seconds", a.golden_seconds()}, {"lease_expiries", a.lease_expiries()},
           {"launcher", a.launcher()}, {"target", a.target()}});
    }
    if (agents_only) {
      std::printf("%s\n", out["agents"].dump().c_str());
      return 0;
    }
    out["queued_requests"] = status.queued_requests();
    out["leases"] = status.leases();
    out["redispatches"] = status.redispatches();
    out["dropped_results"] = status.dropped_results();
    for (const v1::JobSummary& j : status.jobs()) {
      out["jobs"].push_back({{"job_id", j.job_id()}, {"owner", j.owner()}, {"task", j.task()},
                             {"state", j.state()}, {"trials_done", j.trials_done()},
                             {"trials", j.trials()}, {"trials_per_second", j.trials_per_second()},
                             {"best_gflops", j.best_gflops()}, {"message", j.message()},
                             {"priority", j.priority()},
                             {"warnings", std::vector<std::string>(j.warnings().begin(),
                                                                   j.warnings().end())}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (agents_only) {
    std::printf("  %-10s %-14s %-11s %-62s %s\n", "id", "device key", "state", "target", "launcher");
    for (const v1::AgentStatus& a : status.agents())
      std::printf("  %-10s %-14s %-11s %-62s %s\n", a.agent_id().c_str(), a.device_key().c_str(),
                  a.state().c_str(), a.target().empty() ? "-" : a.target().c_str(),
                  a.launcher().empty() ? "-" : a.launcher().c_str());
    return 0;
  }
  std::printf("agents (%d)\n", status.agents_size());
  std::printf("  %-10s %-14s %-11s %-16s %-26s %10s %8s %-14s %s\n", "id", "device key", "state",
              "host", "triple", "measured", "errors", "last heartbeat", "golden / reason");
  for (const v1::AgentStatus& a : status.agents()) {
    std::string heartbeat = a.last_heartbeat_unix_ms()
                                ? std::to_string((NowMs() - a.last_heartbeat_unix_ms()) / 1000) + " s ago"
                                : "-";
    char golden[32] = "-";
    if (a.golden_seconds() > 0) std::snprintf(golden, sizeof(golden), "%.3f ms", a.golden_seconds() * 1e3);
    std::printf("  %-10s %-14s %-11s %-16s %-26s %10lld %7.1f%% %-14s %s%s%s\n", a.agent_id().c_str(),
                a.device_key().c_str(), a.state().c_str(), a.hostname().c_str(), a.triple().c_str(),
                static_cast<long long>(a.measurements()),
                a.measurements() ? 100.0 * a.errors() / a.measurements() : 0.0, heartbeat.c_str(),
                golden, a.state_reason().empty() ? "" : "  -- ",
                a.state_reason().c_str());
  }
  std::printf("requests: %d queued, %d leased; since start %lld re-dispatched, %lld late "
              "results dropped\n",
              status.queued_requests(), status.leases(),
              static_cast<long long>(status.redispatches()),
              static_cast<long long>(status.dropped_results()));
  std::printf("jobs (%d)\n", status.jobs_size());
  for (const v1::JobSummary& j : status.jobs()) {
    std::printf("  %-22s %-10s p%-2d %-10s %5d/%-5d %6.2f trials/s %8.2f GFLOP/s  %s%s%s\n",
                j.job_id().c_str(), j.owner().c_str(), j.priority(), j.state().c_str(),
                j.trials_done(), j.trials(),
                j.trials_per_second(), j.best_gflops(), j.task().c_str(),
                j.message().empty() ? "" : "  -- ", j.message().c_str());
    for (const std::string& w : j.warnings()) std::printf("    warning: %s\n", w.c_str());
  }
  return 0;
}

}  // namespace tuneforge::cli
