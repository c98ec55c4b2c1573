// `tuneforge bench db --records N`: the tuning-log database at scale. Fills a fresh
// SQLite file with N synthetic records (many tasks x a few targets, a share of them
// re-measurements), then measures the batched insert rate, best-config and top-k query
// latency (p50/p99 over random (task, target) pairs), the dashboard's data endpoints
// over HTTP on a server opened on that file (p50/p99 per endpoint), export and import
// time of the whole log, and the file sizes. Figures are printed, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/stats.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "db/database.h"
#include "db/tuning_log_format.h"
#include "nlohmann/json.hpp"
#include "bench/bench.h"
#include "cli/flags.h"
#include "server/http/http_client.h"
#include "server/server.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench db [--records N] [--tasks W] [--targets T] [--batch B]\n"
    "                          [--queries Q] [--dir DIR] [--interleaved] [--json]\n"
    "  --records  records to insert (default 1000000)\n"
    "  --tasks    distinct workloads (default 1000); --targets targets (default 4)\n"
    "  --batch    records per Insert call, i.e. per transaction (default 10000)\n"
    "  --queries  best and top-k queries to time (default 10000)\n"
    "  --dashboard-queries  requests per dashboard endpoint (default 200; 0 = skip)\n"
    "  --interleaved  spread consecutive records over all (task, target) pairs (the\n"
    "             worst case for index locality) instead of pair by pair, as tuning jobs\n"
    "             write them\n"
    "  --dir      where the scratch databases go (default: the system temp dir); they are\n"
    "             deleted at the end\n";

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Workload w: a real matmul task (distinct for every w), so a job that names tasks
// finds its records by their workload keys.
std::string BenchTaskText(int64_t w) {
  int64_t m = 64 + 16 * (w % 61), n = 64 + 32 * (w / 61 % 31), k = 128 + 64 * (w / 1891);
  return absl::StrCat("matmul M=", m, " N=", n, " K=", k);
}

WorkloadInfo BenchWorkload(int64_t w) {
  absl::StatusOr<TuningTask> task = ParseTask(BenchTaskText(w));
  TF_CHECK(task.ok(), task.status().ToString());
  return WorkloadInfo{task->WorkloadKey(), task->op(), task->CanonicalText(), task->ToJson(),
                      task->Flops()};
}

TargetInfo BenchTarget(int64_t t) {
  return TargetInfo{absl::StrCat("x86_64-pc-linux-gnu/znver4/t8/bench", t, "/f0"),
                    "x86_64-pc-linux-gnu",
                    "znver4",
                    "+avx2,+fma",
                    8,
                    absl::StrCat("bench", t)};
}

// Times each dashboard endpoint `n` times over HTTP on a server opened on `db_path`
// (open, no tokens: the session check is a cookie lookup either way). Jobs with
// records are bench-job-0 .. bench-job-(jobs_with_records - 1); the log page's offset,
// the job and the record are drawn at random. Milliseconds, {endpoint: {p50, p99}}.
absl::StatusOr<nlohmann::json> DashboardQueries(const std::string& db_path, int64_t pairs,
                                                int64_t records, int64_t jobs_with_records,
                                                int64_t n, std::mt19937_64& rng) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.db_path = db_path;
  options.builder_threads = 1;
  options.golden_check = false;
  ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Start(options));
  const int port = server->metrics_port();
  std::uniform_int_distribution<int64_t> page(0, std::max<int64_t>(0, pairs / 50 - 1));
  std::uniform_int_distribution<int64_t> job(0, std::max<int64_t>(0, jobs_with_records - 1));
  std::uniform_int_distribution<int64_t> record(1, records);
  const std::vector<std::pair<std::string, std::function<std::string()>>> endpoints = {
      {"/ (the page)", [] { return std::string("/"); }},
      {"/api/jobs", [] { return std::string("/api/jobs?limit=200"); }},
      {"/api/job (a job of 20,000 points)",
       [&] { return absl::StrCat("/api/job?id=bench-job-", job(rng)); }},
      {"/api/agents", [] { return std::string("/api/agents"); }},
      {"/api/log (random page)", [&] { return absl::StrCat("/api/log?offset=", 50 * page(rng)); }},
      {"/api/log?op=matmul&target=...",
       [&] { return absl::StrCat("/api/log?op=matmul&target=", BenchTarget(1).key, "&offset=",
                                 50 * (page(rng) % std::max<int64_t>(1, pairs / 200))); }},
      {"/api/record", [&] { return absl::StrCat("/api/record?id=", record(rng)); }},
  };
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, target] : endpoints) {
    std::vector<double> ms;
    for (int64_t i = 0; i < n; ++i) {
      std::string path = target();
      auto s = Clock::now();
      http::ClientResponse r = http::Get("127.0.0.1", port, path);
      ms.push_back(Seconds(s) * 1e3);
      if (r.status != 200) {
        return absl::InternalError(absl::StrCat("bench: GET ", path, " answered ", r.status, " ",
                                                r.error, r.body.substr(0, 200)));
      }
    }
    out[name] = {{"p50", Percentile(ms, 0.5)}, {"p99", Percentile(ms, 0.99)}};
  }
  // What the job page was timed on: its point count (the page of bench-job-0).
  http::ClientResponse job0 = http::Get("127.0.0.1", port, "/api/job?id=bench-job-0");
  nlohmann::json parsed = nlohmann::json::parse(job0.body, nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("points") || parsed["points"].empty()) {
    return absl::InternalError("bench: the job page of bench-job-0 has no points");
  }
  out["/api/job (a job of 20,000 points)"]["points"] = parsed["points"].size();
  server->Shutdown();
  return out;
}

}  // namespace

absl::StatusOr<int> BenchDbCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args, {"records", "tasks", "targets", "batch", "queries", "dir",
                                 "dashboard-queries"},
                                {"json", "help", "interleaved"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  ASSIGN_OR_RETURN(int64_t records, flags.GetInt("records", 1000000, 1, 100000000));
  ASSIGN_OR_RETURN(int64_t tasks, flags.GetInt("tasks", 1000, 1, 1000000));
  ASSIGN_OR_RETURN(int64_t targets, flags.GetInt("targets", 4, 1, 1000));
  ASSIGN_OR_RETURN(int64_t batch_size, flags.GetInt("batch", 10000, 1, 1000000));
  ASSIGN_OR_RETURN(int64_t queries, flags.GetInt("queries", 10000, 1, 10000000));
  ASSIGN_OR_RETURN(int64_t dashboard_queries, flags.GetInt("dashboard-queries", 200, 0, 100000));
  namespace fs = std::filesystem;
  std::string dir_pattern =
      (fs::path(flags.Get("dir", fs::temp_directory_path().string())) / "tuneforge_bench_db_XXXXXX")
          .string();
  if (mkdtemp(dir_pattern.data()) == nullptr) {
    return absl::PermissionDeniedError("cannot create a scratch directory like " + dir_pattern);
  }
  const fs::path dir = dir_pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};

  DatabaseOptions options;
  options.path = (dir / "bench.db").string();
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(options));

  // Insert: by default records arrive pair by pair (a tuning job writes one task on
  // one target), --interleaved spreads them round-robin over all pairs. Every 8th
  // record of a pair re-measures the config measured just before (as the tuner's final
  // re-measurement does); the rest are new configs.
  const bool interleaved = flags.Has("interleaved");
  const int64_t per_pair = (records + tasks * targets - 1) / (tasks * targets);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> cost(1e-4, 1e-2);
  const int64_t pairs = tasks * targets;
  std::vector<WorkloadInfo> workloads;
  for (int64_t w = 0; w < tasks; ++w) workloads.push_back(BenchWorkload(w));
  std::vector<TargetInfo> target_infos;
  for (int64_t t = 0; t < targets; ++t) target_infos.push_back(BenchTarget(t));
  auto start = Clock::now();
  // CPU time too: on a shared machine, wall time measures the neighbours.
  const std::clock_t cpu_start = std::clock();
  // Measured over the last records x 1 ms, up to a second ago (the dashboard looks for
  // a job's records from a day before the job was stored).
  const int64_t t0 = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() -
                     records * 1000 - 1000000;
  // The Database::Insert calls alone, apart from making the records (which a tuning
  // job does anyway): the database's own rate.
  double db_insert_s = 0;
  std::clock_t db_insert_cpu = 0;
  for (int64_t done = 0; done < records;) {
    std::vector<TuningRecord> batch;
    int64_t n = std::min(batch_size, records - done);
    batch.reserve(static_cast<size_t>(n));
    for (int64_t i = done; i < done + n; ++i) {
      int64_t pair = interleaved ? i % pairs : i / per_pair;
      int64_t round = interleaved ? i / pairs : i % per_pair;
      TuningRecord r;
      r.workload = workloads[static_cast<size_t>(pair % tasks)];
      r.target = target_infos[static_cast<size_t>(pair / tasks)];
      r.template_name = "matmul_cpu";
      r.template_version = 1;
      int64_t config = (round % 8 == 7) ? round - 1 : round;
      r.config_json = absl::StrCat(R"({"accumulate":"registers","loop_order":"ijk","tile_k":)",
                                   4 << (config % 8), R"(,"tile_i_reg":)", config, "}");
      double c = cost(rng);
      r.result.costs = {c, c * 1.01, c * 0.99};
      r.result.start_unix_us = t0 + i * 1000;
      r.result.end_unix_us = r.result.start_unix_us + 900;
      r.result.agent_id = "bench-agent";
      r.result.environment_json = R"({"cpu":"bench"})";
      r.job_id = absl::StrCat("bench-job-", round / 100);
      batch.push_back(std::move(r));
    }
    const auto call_start = Clock::now();
    const std::clock_t call_cpu_start = std::clock();
    ASSIGN_OR_RETURN(CommitResult committed, db->Insert(batch));
    db_insert_cpu += std::clock() - call_cpu_start;
    db_insert_s += Seconds(call_start);
    if (committed.inserted != n) {
      return absl::InternalError(
          absl::StrCat("bench: expected ", n, " new records, got ", committed.inserted));
    }
    done += n;
  }
  const double insert_s = Seconds(start);
  const double insert_cpu_s = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;

  // Queries on random pairs.
  std::uniform_int_distribution<int64_t> pick(0, pairs - 1);
  std::vector<double> best_us, topk_us;
  for (int64_t q = 0; q < queries; ++q) {
    int64_t pair = pick(rng);
    const std::string& wk = workloads[static_cast<size_t>(pair % tasks)].key;
    const std::string& tk = target_infos[static_cast<size_t>(pair / tasks)].key;
    auto s = Clock::now();
    absl::StatusOr<TuningRecord> best = db->Best(wk, tk);
    best_us.push_back(Seconds(s) * 1e6);
    if (!best.ok() && !absl::IsNotFound(best.status())) return best.status();
    s = Clock::now();
    absl::StatusOr<std::vector<RankedConfig>> top = db->TopK(wk, tk, 10);
    topk_us.push_back(Seconds(s) * 1e6);
    if (!top.ok()) return top.status();
  }

  // The dashboard's data over HTTP, from a server on the same file.
  nlohmann::json dashboard = nlohmann::json::object();
  if (dashboard_queries > 0) {
    // A job list of 1,000 stored jobs. The records' jobs (bench-job-0, 1, ...: rounds
    // 0-99, 100-199, ... of every pair) are stored as model jobs of the first 50
    // workloads' tasks: on 4 targets, pages of up to 50 x 4 x 100 = 20,000 points.
    std::string model_tasks;
    for (int64_t w = 0; w < std::min<int64_t>(50, tasks); ++w) {
      absl::StrAppend(&model_tasks, w ? "," : "", R"({"task":")", BenchTaskText(w), R"(","weight":1})");
    }
    for (int64_t j = 0; j < 1000; ++j) {
      JobRow row;
      row.id = absl::StrCat("bench-job-", j);
      row.owner = "bench";
      row.spec_json = j < (per_pair + 99) / 100
                          ? absl::StrCat(R"({"tasks":[)", model_tasks, R"(],"trials":20000})")
                          : R"({"task":"matmul M=64 N=64 K=128","trials":200})";
      row.state = "SUCCEEDED";
      RETURN_IF_ERROR(db->PutJob(row));
    }
    ASSIGN_OR_RETURN(dashboard, DashboardQueries(options.path, pairs, records,
                                                 (per_pair + 99) / 100, dashboard_queries, rng));
  }

  // Export and import of the whole log.
  const std::string log_path = (dir / "bench.jsonl").string();
  start = Clock::now();
  {
    std::ofstream out(log_path, std::ios::binary);
    ASSIGN_OR_RETURN(int64_t exported, ExportLog(*db, ExportOptions(), out));
    if (exported != records) return absl::InternalError("bench: export count mismatch");
  }
  const double export_s = Seconds(start);
  DatabaseOptions import_options;
  import_options.path = (dir / "imported.db").string();
  ASSIGN_OR_RETURN(std::unique_ptr<Database> imported, Database::Open(import_options));
  start = Clock::now();
  {
    std::ifstream in(log_path, std::ios::binary);
    ASSIGN_OR_RETURN(ImportReport report,
                     ImportLog(*imported, in, static_cast<size_t>(batch_size)));
    if (report.inserted != records || !report.rejected.empty()) {
      return absl::InternalError(
          absl::StrCat("bench: import stored ", report.inserted, " of ", records, " records"));
    }
  }
  const double import_s = Seconds(start);
  ASSIGN_OR_RETURN(DatabaseStats stats, db->Stats());
  const int64_t log_bytes = static_cast<int64_t>(fs::file_size(log_path));
  // Stats counts the WAL too (up to 64 MiB of it between checkpoints); closing the
  // connection checkpoints it into the main file, which then holds everything.
  db.reset();
  imported.reset();
  std::error_code size_error;
  const int64_t main_bytes = static_cast<int64_t>(fs::file_size(options.path, size_error));

  nlohmann::json out = {
      {"records", records},
      {"tasks", tasks},
      {"targets", targets},
      {"batch", batch_size},
      {"interleaved", interleaved},
      {"insert_seconds", insert_s},
      {"insert_records_per_second", static_cast<double>(records) / insert_s},
      {"insert_cpu_seconds", insert_cpu_s},
      {"insert_records_per_cpu_second", static_cast<double>(records) / insert_cpu_s},
      {"db_insert_seconds", db_insert_s},
      {"db_insert_records_per_second", static_cast<double>(records) / db_insert_s},
      {"db_insert_records_per_cpu_second",
       static_cast<double>(records) / (static_cast<double>(db_insert_cpu) / CLOCKS_PER_SEC)},
      {"best_p50_us", Percentile(best_us, 0.5)},
      {"best_p99_us", Percentile(best_us, 0.99)},
      {"topk10_p50_us", Percentile(topk_us, 0.5)},
      {"topk10_p99_us", Percentile(topk_us, 0.99)},
      {"export_seconds", export_s},
      {"import_seconds", import_s},
      {"db_file_bytes", stats.file_bytes},
      {"db_main_file_bytes", main_bytes},
      {"export_file_bytes", log_bytes},
      {"dashboard_ms", dashboard},
  };
  if (flags.Has("json")) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "tuning-log db: %lld records, %lld tasks x %lld targets, batches of %lld%s\n"
      "  insert        %8.1f s   %10.0f records/s   (%.0f records per CPU-second)\n"
      "    of which Database::Insert %8.1f s   %10.0f records/s   (%.0f per CPU-second;\n"
      "    the rest is the benchmark making the records)\n"
      "  best          p50 %7.1f us   p99 %7.1f us   (%lld queries)\n"
      "  top-10        p50 %7.1f us   p99 %7.1f us\n"
      "  export        %8.1f s   (%.1f MiB JSON lines)\n"
      "  import        %8.1f s\n"
      "  db file       %8.1f MiB with the WAL; %.1f MiB once closed (%.0f bytes/record)\n",
      static_cast<long long>(records), static_cast<long long>(tasks),
      static_cast<long long>(targets), static_cast<long long>(batch_size),
      interleaved ? ", interleaved" : ", pair by pair", insert_s,
      static_cast<double>(records) / insert_s, static_cast<double>(records) / insert_cpu_s,
      db_insert_s, static_cast<double>(records) / db_insert_s,
      static_cast<double>(records) / (static_cast<double>(db_insert_cpu) / CLOCKS_PER_SEC),
      Percentile(best_us, 0.5), Percentile(best_us, 0.99), static_cast<long long>(queries),
      Percentile(topk_us, 0.5), Percentile(topk_us, 0.99), export_s, log_bytes / 1048576.0,
      import_s, stats.file_bytes / 1048576.0, main_bytes / 1048576.0,
      static_cast<double>(main_bytes) / static_cast<double>(records));
  for (const auto& [endpoint, ms] : dashboard.items()) {
    std::printf("  dashboard %-34s p50 %7.2f ms   p99 %7.2f ms%s\n", endpoint.c_str(),
                ms["p50"].get<double>(), ms["p99"].get<double>(),
                ms.contains("points") ? absl::StrCat("   (", ms["points"].get<int64_t>(), " points)").c_str() : "");
  }
  return 0;
}

}  // namespace tuneforge::cli
