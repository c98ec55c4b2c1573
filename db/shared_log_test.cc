// Tests of the shared tuning log (issue 6): the v1 -> v2 migration, content ids and
// idempotent writes, the noise-aware ranking, history and summaries, export / import /
// merge, AutoTVM import, compaction, a full disk, and grouped writers. Real SQLite
// files in a temporary directory.

#include <sqlite3.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/unprivileged_child.h"
#include "db/database.h"
#include "db/schema.h"
#include "db/tuning_log_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tuneforge {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

WorkloadInfo Workload(const std::string& name) {
  return WorkloadInfo{"wl-" + name, "matmul", "matmul " + name + " dtype=float32",
                      R"({"op":"matmul"})", 1e9};
}

TargetInfo Target(const std::string& device) {
  return TargetInfo{
      "x86_64/znver4/t4/" + device + "/f0", "x86_64-pc-linux-gnu", "znver4", "+avx2", 4, device};
}

int64_t NextTime() {
  static std::atomic<int64_t> t{1700000000000000};
  return t += 1000;
}

TuningRecord Record(const WorkloadInfo& w, const TargetInfo& t, const std::string& config,
                    std::vector<double> costs, MeasureErrorKind error = MeasureErrorKind::kNone) {
  TuningRecord r;
  r.workload = w;
  r.target = t;
  r.template_name = "matmul_cpu";
  r.template_version = 1;
  r.config_json = config;
  r.result.costs = std::move(costs);
  r.result.error = error;
  r.result.start_unix_us = NextTime();
  r.result.end_unix_us = r.result.start_unix_us + 500;
  r.result.agent_id = "agent-1";
  r.result.environment_json = R"({"cpu":"test"})";
  return r;
}

void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

class SharedLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "tuneforge_log_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::unique_ptr<Database> Open(const std::string& name, DatabaseOptions options = {}) {
    options.path = Path(name);
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  std::string dir_;
};

TEST_F(SharedLogTest, MigratesAVersion1FileKeepingEveryRecord) {
  const std::string path = Path("v1.db");
  // A file exactly as a v1 build left it, including a measurement stored twice
  // (v1 had no content ids).
  RawSql(path, absl::StrCat(
                   "BEGIN; CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                   "applied_unix_us INTEGER NOT NULL, description TEXT NOT NULL);",
                   db_internal::Migrations()[0].sql,
                   "INSERT INTO schema_migrations VALUES (1, 0, 'v1');"
                   "INSERT INTO workloads VALUES (1, 'wl-a', 'matmul', 'matmul a', '{}', 1e9);"
                   "INSERT INTO targets VALUES (1, 'tk', 'x86_64', 'znver4', '', 4, 'epyc');"
                   "INSERT INTO records (workload_id, target_id, template_name, template_version, "
                   "config_json, costs_json, median_cost, error_kind, error_message, "
                   "build_seconds, start_unix_us, end_unix_us, agent_id, environment_json, "
                   "created_unix_us) VALUES "
                   "(1, 1, 'matmul_cpu', 1, '{\"a\":1}', '[2.0]', 2.0, 'none', '', 0, 5, 6, 'x', "
                   "'{}', 0), "
                   "(1, 1, 'matmul_cpu', 1, '{\"a\":1}', '[2.0]', 2.0, 'none', '', 0, 5, 6, 'x', "
                   "'{}', 0), "
                   "(1, 1, 'matmul_cpu', 1, '{\"a\":2}', '[1.0]', 1.0, 'wrong_answer', '', 0, 7, "
                   "8, 'x', '{}', 0), "
                   "(1, 1, 'matmul_cpu', 1, '{\"a\":3}', '[3.0]', 3.0, 'none', '', 0, 9, 10, 'x', "
                   "'{}', 0);"
                   "PRAGMA application_id = ",
                   db_internal::kApplicationId, "; COMMIT;"));
  std::unique_ptr<Database> db = Open("v1.db");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->SchemaVersion(), 6);
  absl::StatusOr<std::vector<TuningRecord>> all = db->Records("", "");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].content_id, ContentId((*all)[0]));
  EXPECT_THAT((*all)[1].content_id, HasSubstr("-v1dup"));
  // {"a":1} was measured twice: re-measured, so it beats {"a":3}; {"a":2} was wrong.
  absl::StatusOr<std::vector<RankedConfig>> top = db->TopK("wl-a", "tk", 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 2u);
  EXPECT_EQ((*top)[0].config_json, R"({"a":1})");
  EXPECT_TRUE((*top)[0].remeasured);
  EXPECT_EQ((*top)[1].config_json, R"({"a":3})");
  EXPECT_EQ(RawQuery(path, "PRAGMA integrity_check"), "ok");
  // The migrated content index (v6: keyed by workload, target, content id) still
  // makes a measurement a duplicate of itself.
  absl::StatusOr<CommitResult> again = db->Insert({(*all)[0]});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->duplicates, 1);
  EXPECT_EQ(db->Records("", "")->size(), 4u);
}

TEST_F(SharedLogTest, SameMeasurementTwiceIsStoredOnce) {
  std::unique_ptr<Database> db = Open("a.db");
  TuningRecord r = Record(Workload("a"), Target("x"), R"({"k":1})", {1.0, 1.1});
  absl::StatusOr<CommitResult> first = db->Insert({r});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->inserted, 1);
  absl::StatusOr<CommitResult> again = db->Insert({r, r});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->inserted, 0);
  EXPECT_EQ(again->duplicates, 2);
  EXPECT_EQ(again->ids, std::vector<int64_t>({first->ids[0], first->ids[0]}));
  EXPECT_EQ(db->Records("", "")->size(), 1u);
  // A different time is a different measurement.
  TuningRecord later = r;
  later.result.start_unix_us += 1;
  EXPECT_EQ(db->Insert({later})->inserted, 1);
}

TEST_F(SharedLogTest, BestIsNoiseAware) {
  std::unique_ptr<Database> db = Open("a.db");
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("x");
  ASSERT_TRUE(
      db->Insert({
                     // Measured once, and luckily fast.
                     Record(w, t, R"({"c":"lucky"})", {0.5, 0.5, 0.5}),
                     // Re-measured: pooled samples 1.0 1.0 1.2 | 0.9 1.0 -> median 1.0
                     Record(w, t, R"({"c":"steady"})", {1.0, 1.0, 1.2}),
                     Record(w, t, R"({"c":"steady"})", {0.9, 1.0}),
                     // Re-measured and faster, but one run gave a wrong answer.
                     Record(w, t, R"({"c":"wrong"})", {0.1}),
                     Record(w, t, R"({"c":"wrong"})", {0.1}),
                     Record(w, t, R"({"c":"wrong"})", {0.1}, MeasureErrorKind::kWrongAnswer),
                     // Re-measured, slower.
                     Record(w, t, R"({"c":"slow"})", {2.0}),
                     Record(w, t, R"({"c":"slow"})", {3.0}, MeasureErrorKind::kRunTimeout),
                     Record(w, t, R"({"c":"slow"})", {2.2}),
                 })
          .ok());
  absl::StatusOr<std::vector<RankedConfig>> top = db->TopK(w.key, t.key, 10);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 3u);
  EXPECT_EQ((*top)[0].config_json, R"({"c":"steady"})");
  EXPECT_DOUBLE_EQ((*top)[0].median_cost, 1.0);
  EXPECT_EQ((*top)[0].measurements, 2);
  EXPECT_EQ((*top)[0].samples, 5);
  EXPECT_EQ((*top)[1].config_json, R"({"c":"slow"})");
  EXPECT_DOUBLE_EQ((*top)[1].median_cost, 2.1);
  EXPECT_EQ((*top)[2].config_json, R"({"c":"lucky"})");
  EXPECT_FALSE((*top)[2].remeasured);

  absl::StatusOr<TuningRecord> best = db->Best(w.key, t.key);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, R"({"c":"steady"})");
  EXPECT_EQ(best->result.costs, std::vector<double>({0.9, 1.0}));  // its latest record
  EXPECT_EQ(db->TopK(w.key, t.key, 1)->size(), 1u);
  EXPECT_TRUE(absl::IsInvalidArgument(db->TopK(w.key, t.key, 0).status()));
  EXPECT_TRUE(db->TopK(w.key, Target("y").key, 3)->empty());

  // A config that has given a wrong answer stays out even after good measurements.
  ASSERT_TRUE(db->Insert({Record(w, t, R"({"c":"wrong"})", {0.01})}).ok());
  EXPECT_EQ(db->Best(w.key, t.key)->config_json, R"({"c":"steady"})");
}

TEST_F(SharedLogTest, HistorySummariesAndTemplateVersions) {
  std::unique_ptr<Database> db = Open("a.db");
  WorkloadInfo w = Workload("a");
  TargetInfo x = Target("x"), y = Target("y");
  TuningRecord old_version = Record(w, x, "{}", {4.0});
  old_version.template_version = 0;
  ASSERT_TRUE(db->Insert({old_version, Record(w, x, "{1}", {3.0}),
                          Record(w, x, "{2}", {}, MeasureErrorKind::kBuildError),
                          Record(w, x, "{3}", {5.0}), Record(w, x, "{4}", {1.0}),
                          Record(Workload("b"), y, "{}", {1.0})})
                  .ok());
  absl::StatusOr<std::vector<HistoryPoint>> h = db->History(w.key, x.key);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->size(), 5u);
  std::vector<bool> improved;
  for (const HistoryPoint& p : *h) improved.push_back(p.improved);
  EXPECT_EQ(improved, std::vector<bool>({true, true, false, false, true}));
  EXPECT_EQ(h->back().best_so_far, 1.0);

  absl::StatusOr<std::vector<TargetStats>> targets = db->TargetSummaries();
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->size(), 2u);
  EXPECT_EQ((*targets)[0].target.key, x.key);
  EXPECT_EQ((*targets)[0].records, 5);
  EXPECT_EQ((*targets)[0].errors, 1);
  EXPECT_EQ((*targets)[0].workloads, 1);

  absl::StatusOr<std::vector<TemplateVersionSummary>> versions = db->TemplateVersions(w.key, x.key);
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 1u);
  EXPECT_EQ((*versions)[0].template_name, "matmul_cpu");
  EXPECT_EQ((*versions)[0].newest_version, 1);
  EXPECT_TRUE(db->TemplateVersions(w.key, y.key)->empty());

  absl::StatusOr<DatabaseStats> stats = db->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->schema_version, 6);
  EXPECT_EQ(stats->records, 6);
  EXPECT_EQ(stats->failed_records, 1);
  EXPECT_EQ(stats->workloads, 2);
  EXPECT_EQ(stats->targets, 2);
  EXPECT_GT(stats->file_bytes, 0);
}

TEST_F(SharedLogTest, ExportImportRoundTripIsExactAndIdempotent) {
  std::unique_ptr<Database> src = Open("src.db");
  WorkloadInfo w = Workload("a");
  TargetInfo x = Target("x"), y = Target("y");
  TuningRecord odd = Record(w, x, R"({"q":"\"quoted\" \u00e9"})", {1e-7, 3.0000000000000004});
  odd.result.error_message = "line1\nline2";
  odd.job_id = "job-1";
  odd.proposed_by = "heuristic";
  ASSERT_TRUE(src->Insert({odd, Record(w, y, "{}", {2.0}),
                           Record(w, x, "{}", {}, MeasureErrorKind::kRuntimeError)})
                  .ok());
  std::stringstream log;
  absl::StatusOr<int64_t> n = ExportLog(*src, ExportOptions(), log);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3);

  std::unique_ptr<Database> dst = Open("dst.db");
  std::stringstream in1(log.str());
  absl::StatusOr<ImportReport> first = ImportLog(*dst, in1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->inserted, 3);
  EXPECT_TRUE(first->rejected.empty());
  std::stringstream in2(log.str());
  absl::StatusOr<ImportReport> second = ImportLog(*dst, in2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->inserted, 0);
  EXPECT_EQ(second->duplicates, 3);

  std::vector<TuningRecord> a = *src->Records("", ""), b = *dst->Records("", "");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].content_id, b[i].content_id);
    EXPECT_EQ(a[i].config_json, b[i].config_json);
    EXPECT_EQ(a[i].result.costs, b[i].result.costs);
    EXPECT_EQ(a[i].result.error_message, b[i].result.error_message);
    EXPECT_EQ(a[i].job_id, b[i].job_id);
    EXPECT_EQ(a[i].proposed_by, b[i].proposed_by);
  }
  EXPECT_EQ(b[0].proposed_by, "heuristic");

  // Filters: one target; a time window.
  ExportOptions only_y;
  only_y.filter.target_key = y.key;
  std::stringstream ylog;
  EXPECT_EQ(*ExportLog(*src, only_y, ylog), 1);
  ExportOptions window;
  window.filter.since_unix_us = a[1].result.start_unix_us;
  window.filter.until_unix_us = a[2].result.start_unix_us;
  std::stringstream wlog;
  EXPECT_EQ(*ExportLog(*src, window, wlog), 1);
}

TEST_F(SharedLogTest, ImportRejectsBadLinesOneByOne) {
  std::unique_ptr<Database> db = Open("a.db");
  TuningRecord good = Record(Workload("a"), Target("x"), "{}", {1.0});
  std::string line = RecordToLogLine(good);
  std::string edited = line;
  edited.replace(edited.find("\"costs\":[1.0]"), 13, "\"costs\":[0.1]");
  TuningRecord impostor = Record(Workload("a"), Target("x"), "{}", {1.0});
  impostor.workload.task_text = "conv2d";  // same key, another task
  std::stringstream in(LogHeaderLine() + "\n" + line + "\n" + "not json\n" + edited + "\n" +
                       "{\"kind\":\"record\"}\n" + RecordToLogLine(impostor) + "\n\n");
  absl::StatusOr<ImportReport> report = ImportLog(*db, in);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->inserted, 1);
  ASSERT_EQ(report->rejected.size(), 4u);
  EXPECT_EQ(report->rejected[0].first, 3);
  EXPECT_THAT(report->rejected[0].second, HasSubstr("not valid JSON"));
  EXPECT_THAT(report->rejected[1].second, HasSubstr("content_id does not match"));
  EXPECT_THAT(report->rejected[2].second, HasSubstr("must be"));
  EXPECT_EQ(report->rejected[3].first, 6);
  EXPECT_THAT(report->rejected[3].second, HasSubstr("already names"));

  std::stringstream no_header(line + "\n");
  EXPECT_THAT(std::string(ImportLog(*db, no_header).status().message()),
              HasSubstr("not a tuneforge log header"));
  std::stringstream newer("{\"format\":\"tuneforge-log\",\"version\":99}\n" + line + "\n");
  EXPECT_TRUE(absl::IsFailedPrecondition(ImportLog(*db, newer).status()));
}

TEST_F(SharedLogTest, AutoTvmLinesAreKeptAsForeignRecordsOrRejected) {
  std::unique_ptr<Database> db = Open("a.db");
  const std::string dense =
      R"({"input": ["llvm -mcpu=skylake-avx512", "dense_nopack.x86", [["TENSOR", [1, 512], "float32"], ["TENSOR", [1000, 512], "float32"], null, "float32"], {}], "config": {"index": 3, "code_hash": null, "entity": [["tile_y", "sp", [-1, 1]]]}, "result": [[0.0001], 0, 0.5, 1539972731.25], "version": 0.2, "tvm_version": "0.7.dev0"})";
  std::stringstream in("# comment\n" + dense + "\n" +
                       R"({"i": ["llvm", "dense", [], {}], "r": [[1.0], 0, 1, 0], "v": 0.1})" +
                       "\n{\"input\": 5, \"version\": 0.2}\ngarbage\n");
  absl::StatusOr<ImportReport> report = ImportAutoTvmLog(*db, in);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->foreign_inserted, 1);
  ASSERT_EQ(report->rejected.size(), 3u);
  EXPECT_EQ(report->rejected[0].first, 3);
  EXPECT_THAT(report->rejected[0].second, HasSubstr("v0.1 is not supported"));
  EXPECT_THAT(report->rejected[1].second, HasSubstr("\"input\" must be"));
  ASSERT_EQ(report->not_mapped.size(), 1u);
  EXPECT_THAT(report->not_mapped[0].first, HasSubstr("weight^T"));

  std::vector<ForeignRecord> stored;
  ASSERT_TRUE(db->ScanForeign([&](const ForeignRecord& f) {
                  stored.push_back(f);
                  return absl::OkStatus();
                }).ok());
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].task_name, "dense_nopack.x86");
  EXPECT_EQ(stored[0].target_text, "llvm -mcpu=skylake-avx512");
  EXPECT_EQ(stored[0].costs, std::vector<double>{0.0001});
  EXPECT_EQ(stored[0].timestamp_unix_us, 1539972731250000);
  EXPECT_EQ(stored[0].raw, dense);
  // Foreign records never reach the tuneforge ranking or records.
  EXPECT_TRUE(db->Records("", "")->empty());

  // Real TopHub logs (db/testdata/autotvm): every record kept, a second import adds
  // nothing.
  for (const char* name : {"tophub_llvm_v0.04.log", "tophub_arm_cpu_v0.08_cut.log"}) {
    std::string file = std::string(TF_AUTOTVM_DIR) + "/" + name;
    ASSERT_TRUE(fs::exists(file)) << file;
    for (int pass = 0; pass < 2; ++pass) {
      std::ifstream f(file);
      absl::StatusOr<ImportReport> r = ImportAutoTvmLog(*db, f);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->rejected.empty())
          << name << " line " << r->rejected[0].first << ": " << r->rejected[0].second;
      EXPECT_EQ(r->foreign_inserted, pass == 0 ? r->lines : 0) << name;
    }
  }
  EXPECT_EQ(db->Stats()->foreign_records, 1 + 35 + 200);

  // Export carries foreign records; import restores them.
  std::stringstream log;
  ASSERT_TRUE(ExportLog(*db, ExportOptions(), log).ok());
  std::unique_ptr<Database> copy = Open("copy.db");
  absl::StatusOr<ImportReport> back = ImportLog(*copy, log);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->foreign_inserted, 1 + 35 + 200);
}

TEST_F(SharedLogTest, MergeIsIdempotent) {
  std::unique_ptr<Database> a = Open("a.db");
  std::unique_ptr<Database> b = Open("b.db");
  WorkloadInfo w = Workload("a");
  TuningRecord shared = Record(w, Target("x"), "{}", {1.0});
  ASSERT_TRUE(a->Insert({shared, Record(w, Target("x"), "{1}", {2.0})}).ok());
  ASSERT_TRUE(b->Insert({shared, Record(w, Target("y"), "{}", {3.0})}).ok());
  absl::StatusOr<ImportReport> merged = MergeDatabases(*a, *b);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->inserted, 1);
  EXPECT_EQ(merged->duplicates, 1);
  merged = MergeDatabases(*a, *b);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->inserted, 0);
  EXPECT_EQ(a->Records("", "")->size(), 3u);
}

TEST_F(SharedLogTest, CompactKeepsTheBestAndTheDisqualification) {
  std::unique_ptr<Database> db = Open("a.db");
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("x");
  std::vector<TuningRecord> batch;
  for (int i = 0; i < 200; ++i) {
    TuningRecord r = Record(w, t, absl::StrCat("{\"i\":", i, "}"), {1.0 + i});
    r.result.error_message = std::string(2000, 'x');  // bulk, so VACUUM has pages to return
    batch.push_back(r);
  }
  // The best config is re-measured and slower than the fastest single records.
  batch.push_back(Record(w, t, "{\"best\":1}", {5.0}));
  batch.push_back(Record(w, t, "{\"best\":1}", {5.0}));
  batch.push_back(Record(w, t, "{\"bad\":1}", {0.1}, MeasureErrorKind::kWrongAnswer));
  batch.push_back(Record(w, t, "{\"e\":1}", {}, MeasureErrorKind::kBuildError));
  ASSERT_TRUE(db->Insert(batch).ok());
  ASSERT_EQ(db->Best(w.key, t.key)->config_json, "{\"best\":1}");

  absl::StatusOr<CompactResult> c = db->Compact(3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->records_before, 204);
  EXPECT_EQ(c->records_deleted, 204 - 5);
  EXPECT_LT(c->bytes_after, c->bytes_before);
  EXPECT_EQ(db->Records("", "")->size(), 5u);
  EXPECT_EQ(db->Best(w.key, t.key)->config_json, "{\"best\":1}");
  absl::StatusOr<std::vector<RankedConfig>> top = db->TopK(w.key, t.key, 10);
  ASSERT_EQ(top->size(), 4u);
  // The wrong-answer config's records are gone, but it stays disqualified.
  ASSERT_TRUE(
      db->Insert({Record(w, t, "{\"bad\":1}", {0.01}), Record(w, t, "{\"bad\":1}", {0.01})}).ok());
  EXPECT_EQ(db->Best(w.key, t.key)->config_json, "{\"best\":1}");
  EXPECT_EQ(RawQuery(Path("a.db"), "PRAGMA integrity_check"), "ok");
}

TEST_F(SharedLogTest, FullDiskFailsCleanlyAndLeavesNothingHalfWritten) {
  DatabaseOptions options;
  options.max_file_bytes = 256 << 10;
  std::unique_ptr<Database> db = Open("a.db", options);
  ASSERT_NE(db, nullptr);
  WorkloadInfo w = Workload("a");
  ASSERT_TRUE(db->Insert({Record(w, Target("x"), "{}", {1.0})}).ok());
  std::vector<TuningRecord> big;
  for (int i = 0; i < 400; ++i) {
    TuningRecord r = Record(w, Target("x"), absl::StrCat("{\"i\":", i, "}"), {1.0});
    r.result.error_message = std::string(4000, 'y');
    big.push_back(r);
  }
  absl::StatusOr<CommitResult> full = db->Insert(big);
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(full.status())) << full.status();
  EXPECT_THAT(std::string(full.status().message()), HasSubstr(Path("a.db")));
  EXPECT_EQ(db->Records("", "")->size(), 1u);
  // Still usable for writes that fit.
  ASSERT_TRUE(db->Insert({Record(w, Target("x"), "{\"small\":1}", {1.0})}).ok());
  EXPECT_EQ(db->Records("", "")->size(), 2u);
  EXPECT_EQ(RawQuery(Path("a.db"), "PRAGMA integrity_check"), "ok");
}

TEST_F(SharedLogTest, GroupedWritersFailAlone) {
  std::unique_ptr<Database> db = Open("a.db");
  constexpr int kThreads = 8;
  constexpr int kBatches = 40;
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kBatches; ++j) {
        std::vector<TuningRecord> batch;
        for (int k = 0; k < 5; ++k) {
          batch.push_back(Record(Workload(absl::StrCat("w", i)), Target("x"),
                                 absl::StrCat("{\"j\":", j, ",\"k\":", k, "}"), {1.0 + k}));
        }
        // Every 4th batch of thread 0 has a bad last record: only that batch fails.
        if (i == 0 && j % 4 == 0) batch.back().result.costs = {-1.0};
        (db->Insert(batch).ok() ? ok : refused)++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(refused.load(), kBatches / 4);
  EXPECT_EQ(ok.load(), kThreads * kBatches - kBatches / 4);
  EXPECT_EQ(db->Records("", "")->size(), static_cast<size_t>(ok.load() * 5));
}

// Root ignores file permissions, so the check runs in a child that drops to an
// unprivileged user (nobody) when the test runs as root: the file and its folder are
// then really unwritable. The child reports the error text through a pipe.
TEST_F(SharedLogTest, ReadOnlyFileIsAClearError) {
  ASSERT_NE(Open("a.db"), nullptr);
  fs::permissions(Path("a.db"), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  testing::ChildOutcome child = testing::RunUnprivileged([&]() -> std::pair<int, std::string> {
    DatabaseOptions options;
    options.path = Path("a.db");
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
    if (!db.ok()) return {0, "open: " + std::string(db.status().message())};
    absl::StatusOr<CommitResult> r = (*db)->Insert({Record(Workload("a"), Target("x"), "{}", {1})});
    if (r.ok()) return {3, "insert into a read-only file succeeded"};
    return {0, "insert: " + std::string(r.status().message())};
  });
  fs::permissions(dir_, fs::perms::owner_all);  // for TearDown
  ASSERT_EQ(child.exit_code, 0) << child.text;
  const std::string& text = child.text;
  if (text.rfind("open: ", 0) == 0) {
    EXPECT_THAT(text, HasSubstr(Path("a.db")));
  } else {
    EXPECT_THAT(text, HasSubstr("readonly"));
  }
}

TEST_F(SharedLogTest, CompactedRecordsStayDeletedAfterReimportOrMerge) {
  std::unique_ptr<Database> db = Open("a.db");
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("x");
  std::vector<TuningRecord> batch;
  for (int i = 0; i < 20; ++i) batch.push_back(Record(w, t, absl::StrCat("{\"i\":", i, "}"), {1.0 + i}));
  batch.push_back(Record(w, t, "{\"e\":1}", {}, MeasureErrorKind::kBuildError));
  ASSERT_TRUE(db->Insert(batch).ok());
  // Taken before the compaction: an export, and a copy made by merging.
  std::stringstream log;
  ASSERT_EQ(*ExportLog(*db, ExportOptions(), log), 21);
  std::unique_ptr<Database> copy = Open("copy.db");
  ASSERT_EQ(MergeDatabases(*copy, *db)->inserted, 21);

  absl::StatusOr<CompactResult> c = db->Compact(3);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->records_deleted, 21 - 3);
  EXPECT_EQ(db->Stats()->tombstones, 18);

  // The tombstones are in the file, not in this connection.
  db.reset();
  db = Open("a.db");
  std::stringstream in(log.str());
  absl::StatusOr<ImportReport> imported = ImportLog(*db, in);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->inserted, 0);
  EXPECT_EQ(imported->duplicates, 3);
  EXPECT_EQ(imported->compacted, 18);
  EXPECT_TRUE(imported->rejected.empty());
  absl::StatusOr<ImportReport> merged = MergeDatabases(*db, *copy);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->inserted, 0);
  EXPECT_EQ(merged->compacted, 18);
  EXPECT_EQ(db->Records("", "")->size(), 3u);
  EXPECT_EQ(db->Best(w.key, t.key)->config_json, "{\"i\":0}");

  // A deleted record reports id 0; new measurements are stored as always.
  absl::StatusOr<CommitResult> mixed = db->Insert({batch[19], Record(w, t, "{\"new\":1}", {0.5})});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->compacted, 1);
  EXPECT_EQ(mixed->inserted, 1);
  EXPECT_EQ(mixed->ids[0], 0);
  EXPECT_GT(mixed->ids[1], 0);
  EXPECT_EQ(db->Best(w.key, t.key)->config_json, "{\"new\":1}");
}

// The import pipeline (a reading thread, a storing thread) stops at a full disk with
// the error; what was committed stays, and importing again completes the log.
TEST_F(SharedLogTest, ImportStoppedByAFullDiskCompletesOnRetry) {
  std::unique_ptr<Database> src = Open("src.db");
  WorkloadInfo w = Workload("a");
  std::vector<TuningRecord> big;
  for (int i = 0; i < 400; ++i) {
    TuningRecord r = Record(w, Target("x"), absl::StrCat("{\"i\":", i, "}"), {1.0 + i});
    r.result.error_message = std::string(4000, 'y');
    big.push_back(r);
  }
  ASSERT_TRUE(src->Insert(big).ok());
  std::stringstream log;
  ASSERT_EQ(*ExportLog(*src, ExportOptions(), log), 400);

  DatabaseOptions small;
  small.max_file_bytes = 512 << 10;
  std::unique_ptr<Database> dst = Open("dst.db", small);
  std::stringstream in1(log.str());
  absl::StatusOr<ImportReport> failed = ImportLog(*dst, in1, /*batch_size=*/20);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(failed.status())) << failed.status();
  const size_t stored = dst->Records("", "")->size();
  EXPECT_GT(stored, 0u);
  EXPECT_LT(stored, 400u);
  EXPECT_EQ(stored % 20, 0u);  // whole batches

  dst.reset();
  dst = Open("dst.db");
  std::stringstream in2(log.str());
  absl::StatusOr<ImportReport> retried = ImportLog(*dst, in2, /*batch_size=*/20);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->duplicates, static_cast<int64_t>(stored));
  EXPECT_EQ(retried->inserted, 400 - static_cast<int64_t>(stored));
  EXPECT_EQ(retried->lines, 401);  // the header too
  EXPECT_EQ(dst->Records("", "")->size(), 400u);
}

}  // namespace
}  // namespace tuneforge
