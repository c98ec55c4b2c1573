// `tuneforge bench noise`: how clean the labels are that the cost model learns from
// (issue 20, docs/search.md "Clean labels"). The same configs of one task are measured
// by the agent's own sandbox (real child processes, the agent binary, the protocol of
// timing.h) under several protocols, interleaved — round r measures every config under
// every protocol before round r+1 — on a quiet machine and next to a noisy neighbour
// (bursts: a process busy 40 ms out of every 120; jobs: busy 2 s out of every 5, like a
// build or a cron job on the same machine). Per protocol it reports:
//   spread      median over records of the samples' relative spread (stats.h)
//   disagree    per config, |a - b| / min(a, b) of two rounds' labels, mean over pairs
//               of rounds: the label's reproducibility, median and 90th percentile
//               over configs
//   rank        mean over pairs of rounds of the share of config pairs both rounds
//               order the same way (what a ranking model learns from)
//   interleaved with >= 4 rounds: the label as the median of two interleaved rounds
//               (rounds 1-2 against rounds 3-4), its disagreement and rank agreement
//   s/record    wall seconds per measurement; remeasured: records measured twice
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench.h"
#include "cli/client.h"
#include "cli/flags.h"
#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/stats.h"
#include "costmodel/xgb_model.h"
#include "compiler/support/status.h"
#include "compiler/codegen/build.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "measure_agent/quiet.h"
#include "measure_agent/sandbox.h"
#include "nlohmann/json.hpp"
#include "server/agent_runner.h"
#include "tuner/builder.h"
#include "tuner/tuning_loop.h"

namespace tuneforge::cli {
namespace {

constexpr char kUsage[] = R"(usage: tuneforge bench noise [options]

Measures the same configs of one task through the agent's sandbox under each
measurement protocol, interleaved, quiet and next to a noisy neighbour, and prints how
much the labels disagree between rounds (docs/search.md "Clean labels").

  --task T        default "matmul M=256 N=256 K=256"
  --configs N     random configs of the task's template (default 24, 2..1000)
  --rounds R      measurements of every config under every protocol (default 4,
                  2..50; >= 4 also reports labels of two interleaved rounds)
  --load L,...    none, bursts, jobs (default: all three): a neighbour process busy
                  40 ms out of every 120 (bursts) or 2 s out of every 5 (jobs)
                  during the measurements
  --seed S        config sample (default 1)
  --json          machine-readable output
  --verbose       every measurement on stderr
Protocols: plain (3 samples, unpinned, no quiet check: before issue 20), spread (3-7
samples until they agree within 5%), clean (spread, pinned, quiet-checked: the
agent's default).
)";

struct Protocol {
  std::string name;
  int max_repeat = 3;
  double max_spread = 0;
  bool pinned = false;
  double quiet = 0;  // max busy share, 0: no check
};

// A process busy `busy_ms` out of every `period_ms` until it is killed.
class NoisyNeighbour {
 public:
  NoisyNeighbour(int busy_ms, int period_ms) {
    pid_ = fork();
    if (pid_ != 0) return;
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(busy_ms)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms - busy_ms));
    }
  }
  ~NoisyNeighbour() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  bool ok() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

struct Cell {  // one (load, protocol)
  std::vector<std::vector<double>> labels;  // [config][round], seconds; empty: failed
  std::vector<double> spreads;              // of every record
  double wall_seconds = 0;
  int measurements = 0, remeasured = 0, failed = 0;
};

// Disagreement of each config's labels (its `rounds` values) and rank agreement of the
// rounds, over the configs every round measured.
struct Agreement {
  double disagree_median = 0, disagree_p90 = 0, rank = 0;
};
Agreement Agree(const std::vector<std::vector<double>>& by_config) {
  std::vector<std::vector<double>> ok;
  for (const auto& labels : by_config)
    if (!labels.empty()) ok.push_back(labels);
  Agreement a;
  if (ok.empty()) return a;
  std::vector<double> disagree;
  for (const auto& labels : ok) {
    double sum = 0;
    int n = 0;
    for (size_t r1 = 0; r1 < labels.size(); ++r1) {
      for (size_t r2 = r1 + 1; r2 < labels.size(); ++r2, ++n) {
        sum += std::abs(labels[r1] - labels[r2]) / std::min(labels[r1], labels[r2]);
      }
    }
    disagree.push_back(n > 0 ? sum / n : 0);
  }
  a.disagree_median = Median(disagree);
  a.disagree_p90 = Percentile(disagree, 0.9);
  const size_t rounds = ok[0].size();
  int round_pairs = 0;
  for (size_t r1 = 0; r1 < rounds; ++r1) {
    for (size_t r2 = r1 + 1; r2 < rounds; ++r2) {
      std::vector<float> x, y;
      for (const auto& labels : ok) {
        x.push_back(static_cast<float>(labels[r1]));
        y.push_back(static_cast<float>(labels[r2]));
      }
      a.rank += costmodel::PairwiseAccuracy(x, y);  // the share of pairs ordered alike
      ++round_pairs;
    }
  }
  if (round_pairs > 0) a.rank /= round_pairs;
  return a;
}

}  // namespace

absl::StatusOr<int> BenchNoiseCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args, {"task", "configs", "rounds", "load", "seed"}, {"json", "help", "verbose"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  SetLogLevel(LogLevel::kWarning);
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task", "matmul M=256 N=256 K=256")));
  ASSIGN_OR_RETURN(int64_t num_configs, flags.GetInt("configs", 24, 2, 1000));
  ASSIGN_OR_RETURN(int64_t rounds, flags.GetInt("rounds", 4, 2, 50));
  ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1, 0, 1'000'000'000));
  std::vector<std::string> loads = absl::StrSplit(flags.Get("load", "none,bursts,jobs"), ',');
  for (const std::string& l : loads) {
    if (l != "none" && l != "bursts" && l != "jobs")
      return absl::InvalidArgumentError("--load takes none, bursts and/or jobs, got '" + l + "'");
  }
  const bool json = flags.Has("json");
  const bool verbose = flags.Has("verbose");
  const std::string agent = AgentBinaryPath();
  if (access(agent.c_str(), X_OK) != 0)
    return absl::FailedPreconditionError("the agent binary (the sandbox child) is not at " + agent);

  // The configs: distinct random ones that build.
  const Target target = DetectHostTarget("bench");
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  const ConfigSpace space = tmpl->Space(task, target);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<Candidate> candidates;
  std::set<std::string> seen;
  for (int tries = 0; static_cast<int64_t>(candidates.size()) < num_configs && tries < 100 * num_configs;
       ++tries) {
    ASSIGN_OR_RETURN(Config c, space.Sample(rng));
    if (seen.insert(c.ToJson()).second) candidates.push_back(Candidate{c, false});
  }
  Builder builder(2);
  std::vector<MeasureInput> inputs;
  ASSIGN_OR_RETURN(std::shared_ptr<const ExpectedOutput> expected,
                   MakeExpectedOutput(task, target, *tmpl, 1));
  for (const BuildResult& b : builder.Build(task, *tmpl, target, candidates)) {
    if (b.error != MeasureErrorKind::kNone) continue;
    inputs.push_back(MeasureInput{task.CanonicalText(), b.candidate.config.ToJson(), b.artifact,
                                  expected, MeasureOptions{}});
  }
  if (inputs.size() < 2) return absl::InternalError("fewer than 2 configs built");

  const std::vector<Protocol> protocols = {
      {"plain", 3, 0, false, 0},
      {"spread", MeasureOptions{}.max_repeat, MeasureOptions{}.max_spread, false, 0},
      {"clean", MeasureOptions{}.max_repeat, MeasureOptions{}.max_spread, true,
       agent::kDefaultMaxBusy},
  };
  if (!json)
    std::printf("bench noise: %s, %zu configs x %lld rounds x %zu protocols, through %s\n",
                task.CanonicalText().c_str(), inputs.size(), static_cast<long long>(rounds),
                protocols.size(), agent.c_str());

  nlohmann::json out = {{"task", task.CanonicalText()}, {"configs", inputs.size()}, {"rounds", rounds}};
  for (const std::string& load : loads) {
    std::vector<Cell> cells(protocols.size());
    std::vector<agent::Sandbox> sandboxes;
    for (const Protocol& p : protocols) {
      agent::SandboxOptions o;
      o.agent_binary = agent;
      o.environment_json = "{}";
      if (p.pinned) o.pin_cpus = agent::AllowedCpus();
      o.quiet.max_busy = p.quiet;
      o.quiet.max_wait_ms = 1000;
      sandboxes.emplace_back(o);
    }
    for (Cell& c : cells) c.labels.assign(inputs.size(), {});
    std::unique_ptr<NoisyNeighbour> neighbour;
    if (load != "none") {
      neighbour = load == "bursts" ? std::make_unique<NoisyNeighbour>(40, 120)
                                   : std::make_unique<NoisyNeighbour>(2000, 5000);
      if (!neighbour->ok()) return absl::InternalError("cannot start the noisy neighbour");
    }
    std::vector<bool> failed(inputs.size(), false);
    for (int64_t r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        // The protocols take turns in a rotating order: none always goes first.
        for (size_t k = 0; k < protocols.size(); ++k) {
          const size_t pi = (k + i + static_cast<size_t>(r)) % protocols.size();
          const Protocol& p = protocols[pi];
          MeasureInput in = inputs[i];
          in.options.max_repeat = p.max_repeat;
          in.options.max_spread = p.max_spread;
          v1::MeasureRequest request =
              MeasureRequestFor(in, absl::StrCat("noise-", load, "-", r, "-", i, "-", p.name));
          const auto start = std::chrono::steady_clock::now();
          v1::MeasureResult result = sandboxes[pi].Run(request);
          Cell& cell = cells[pi];
          cell.wall_seconds += SecondsSince(start);
          ++cell.measurements;
          if (result.error() != v1::NONE || result.costs().empty()) {
            ++cell.failed;
            failed[i] = true;
            continue;
          }
          std::vector<double> costs(result.costs().begin(), result.costs().end());
          cell.labels[i].push_back(Median(costs));
          cell.spreads.push_back(RelativeSpread(costs));
          nlohmann::json env = nlohmann::json::parse(result.environment_json(), nullptr, false);
          if (env.is_object() && env["measurement"].value("remeasured", false)) ++cell.remeasured;
          if (verbose)
            std::fprintf(stderr, "%s %s config %zu round %lld: %.4g s %s\n", load.c_str(),
                         p.name.c_str(), i, static_cast<long long>(r), cell.labels[i].back(),
                         env.is_object() ? env["measurement"].dump().c_str() : "");
        }
      }
    }
    neighbour.reset();
    if (!json) {
      std::printf("\nload: %s\n  %-8s %8s %9s %9s %7s %11s %11s %9s %10s\n", load.c_str(), "protocol",
                  "spread", "disagree", "p90", "rank", "il-disagree", "il-rank", "s/record", "remeasured");
    }
    for (size_t pi = 0; pi < protocols.size(); ++pi) {
      Cell& c = cells[pi];
      std::vector<std::vector<double>> labels;  // configs every protocol measured every round
      for (size_t i = 0; i < inputs.size(); ++i)
        if (!failed[i]) labels.push_back(c.labels[i]);
      const Agreement a = Agree(labels);
      Agreement il;
      const bool interleaved = rounds >= 4;
      if (interleaved) {
        std::vector<std::vector<double>> pairs;
        for (const auto& l : labels)
          pairs.push_back({Median({l[0], l[1]}), Median({l[2], l[3]})});
        il = Agree(pairs);
      }
      const double per_record = c.measurements > 0 ? c.wall_seconds / c.measurements : 0;
      nlohmann::json j = {{"load", load},
                          {"protocol", protocols[pi].name},
                          {"spread_median", Median(c.spreads)},
                          {"disagree_median", a.disagree_median},
                          {"disagree_p90", a.disagree_p90},
                          {"rank_agreement", a.rank},
                          {"seconds_per_record", per_record},
                          {"remeasured", c.remeasured},
                          {"measurements", c.measurements},
                          {"failed", c.failed}};
      if (interleaved) {
        j["interleaved_disagree_median"] = il.disagree_median;
        j["interleaved_rank_agreement"] = il.rank;
      }
      out["cells"].push_back(j);
      if (!json) {
        std::printf("  %-8s %7.2f%% %8.2f%% %8.2f%% %7.3f %10.2f%% %11.3f %9.3f %10d\n",
                    protocols[pi].name.c_str(), 100 * Median(c.spreads), 100 * a.disagree_median,
                    100 * a.disagree_p90, a.rank, 100 * il.disagree_median, il.rank, per_record,
                    c.remeasured);
      }
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace tuneforge::cli
