// Tests of the SQLite Database on real files in a temporary directory. Raw SQLite is
// used only to fake files this build did not write (a newer schema, someone else's
// database) and to look at the file's settings.

#include <sqlite3.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "db/database.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tuneforge {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

WorkloadInfo Workload(const std::string& name) {
  WorkloadInfo w;
  w.key = "wl-" + name;
  w.op = "matmul";
  w.task_text = "matmul " + name + " dtype=float32";
  w.task_json = R"({"op":"matmul","name":")" + name + R"("})";
  w.flops = 2.0 * 64 * 64 * 64;
  return w;
}

TargetInfo Target(const std::string& device) {
  TargetInfo t;
  t.key = "x86_64-pc-linux-gnu/znver4/t4/" + device + "/f0123abcd";
  t.triple = "x86_64-pc-linux-gnu";
  t.cpu = "znver4";
  t.features = "+avx,+avx2,+fma";
  t.num_threads = 4;
  t.device_key = device;
  return t;
}

// Every record gets its own config and start time, so each is a distinct measurement
// of a distinct config (tests of shared configs set config_json themselves).
TuningRecord Record(const WorkloadInfo& w, const TargetInfo& t, std::vector<double> costs,
                    MeasureErrorKind error = MeasureErrorKind::kNone) {
  static std::atomic<int64_t> counter{1};
  int64_t n = counter++;
  TuningRecord r;
  r.workload = w;
  r.target = t;
  r.template_name = "matmul_tiled";
  r.template_version = 2;
  r.config_json = R"({"tile_m":)" + std::to_string(n) + "}";
  r.result.start_unix_us = 1700000000000000 + n;
  r.result.end_unix_us = r.result.start_unix_us + 10;
  r.result.costs = std::move(costs);
  r.result.error = error;
  return r;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Runs SQL on a raw connection, failing the test on error.
void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

std::string RawQueryText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// The contract for every Open error: one line that starts with the path.
void ExpectOneLineNamingPath(const absl::Status& status, const std::string& path) {
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), StartsWith(path));
  EXPECT_FALSE(absl::StrContains(status.message(), "\n")) << status.message();
}

class SqliteDatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "tuneforge_db_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (fs::path(dir_) / "tuning.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Database> OpenOrDie(DatabaseOptions options = {}) {
    if (options.path.empty()) options.path = path_;
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(SqliteDatabaseTest, NewFileGetsSchemaWalAndApplicationId) {
  std::unique_ptr<Database> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->SchemaVersion(), 6);
  db.reset();
  EXPECT_EQ(RawQueryText(path_, "SELECT max(version) FROM schema_migrations"), "6");
  EXPECT_EQ(RawQueryText(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQueryText(path_, "PRAGMA application_id"), std::to_string(0x54465247));
  // Opening again applies nothing twice.
  ASSERT_NE(OpenOrDie(), nullptr);
  EXPECT_EQ(RawQueryText(path_, "SELECT count(*) FROM schema_migrations"), "6");
}

TEST_F(SqliteDatabaseTest, RoundTripKeepsEveryField) {
  std::unique_ptr<Database> db = OpenOrDie();
  TuningRecord r = Record(Workload("a"), Target("epyc"), {3e-3, 1e-3, 2e-3});
  r.job_id = "job-7";
  r.proposed_by = "model:random";
  r.uploaded_by = "alice";
  r.upload_trusted = true;
  r.result.error_message = "ok but 'quoted' \"text\"; DROP TABLE records; --";
  r.result.start_unix_us = 1700000000000001;
  r.result.end_unix_us = 1700000000500002;
  r.result.agent_id = "agent-3";
  r.result.environment_json = R"({"cpu":"AMD EPYC 9654"})";
  r.result.build_seconds = 0.25;
  TuningRecord failed = Record(Workload("a"), Target("epyc"), {}, MeasureErrorKind::kBuildError);
  failed.result.error_message = "llc: error";

  absl::StatusOr<std::vector<int64_t>> ids = db->Commit({r, failed});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_LT((*ids)[0], (*ids)[1]);

  absl::StatusOr<std::vector<TuningRecord>> got = db->Records(r.workload.key, r.target.key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  const TuningRecord& g = (*got)[0];
  EXPECT_EQ(g.id, (*ids)[0]);
  EXPECT_EQ(g.workload.key, r.workload.key);
  EXPECT_EQ(g.workload.op, r.workload.op);
  EXPECT_EQ(g.workload.task_text, r.workload.task_text);
  EXPECT_EQ(g.workload.task_json, r.workload.task_json);
  EXPECT_EQ(g.workload.flops, r.workload.flops);
  EXPECT_EQ(g.target.key, r.target.key);
  EXPECT_EQ(g.target.triple, r.target.triple);
  EXPECT_EQ(g.target.cpu, r.target.cpu);
  EXPECT_EQ(g.target.features, r.target.features);
  EXPECT_EQ(g.target.num_threads, r.target.num_threads);
  EXPECT_EQ(g.target.device_key, r.target.device_key);
  EXPECT_EQ(g.template_name, r.template_name);
  EXPECT_EQ(g.template_version, r.template_version);
  EXPECT_EQ(g.config_json, r.config_json);
  EXPECT_EQ(g.job_id, r.job_id);
  EXPECT_EQ(g.proposed_by, "model:random");
  EXPECT_EQ(g.uploaded_by, "alice");
  EXPECT_TRUE(g.upload_trusted);
  EXPECT_EQ(g.result.costs, r.result.costs);  // exact: JSON keeps doubles round-trippable
  EXPECT_EQ(g.result.error, MeasureErrorKind::kNone);
  EXPECT_EQ(g.result.error_message, r.result.error_message);
  EXPECT_EQ(g.result.start_unix_us, r.result.start_unix_us);
  EXPECT_EQ(g.result.end_unix_us, r.result.end_unix_us);
  EXPECT_EQ(g.result.agent_id, r.result.agent_id);
  EXPECT_EQ(g.result.environment_json, r.result.environment_json);
  EXPECT_EQ(g.result.build_seconds, r.result.build_seconds);
  EXPECT_EQ(g.content_id, ContentId(r));
  EXPECT_EQ(g.content_id.size(), 32u);

  const TuningRecord& f = (*got)[1];
  EXPECT_EQ(f.id, (*ids)[1]);
  EXPECT_TRUE(f.result.costs.empty());
  EXPECT_EQ(f.result.error, MeasureErrorKind::kBuildError);
  EXPECT_EQ(f.result.error_message, "llc: error");
  EXPECT_EQ(f.job_id, "");
  EXPECT_EQ(f.proposed_by, "");
}

TEST_F(SqliteDatabaseTest, BestIsLowestMedianAmongSuccessfulRecords) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("epyc");
  std::vector<TuningRecord> batch = {
      Record(w, t, {3.0, 3.0, 3.0}),
      Record(w, t, {9.0, 2.0, 2.0}),                                  // median 2: the best
      Record(w, t, {0.5, 0.5, 0.5}, MeasureErrorKind::kWrongAnswer),  // faster but wrong
      Record(w, t, {0.1}, MeasureErrorKind::kRuntimeError),
      Record(w, t, {}, MeasureErrorKind::kNone),  // no costs: can never be best
      Record(w, t, {1.0, 2.0, 2.0}),              // also median 2, but later: loses the tie
  };
  absl::StatusOr<std::vector<int64_t>> ids = db->Commit(batch);
  ASSERT_TRUE(ids.ok()) << ids.status();

  absl::StatusOr<TuningRecord> best = db->Best(w.key, t.key);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->id, (*ids)[1]);
  EXPECT_EQ(best->result.MedianCost(), 2.0);
  EXPECT_EQ(best->result.error, MeasureErrorKind::kNone);
}

TEST_F(SqliteDatabaseTest, BestNeverReturnsAWrongAnswer) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("epyc");
  ASSERT_TRUE(db->Commit({Record(w, t, {1e-6}, MeasureErrorKind::kWrongAnswer)}).ok());
  absl::StatusOr<TuningRecord> best = db->Best(w.key, t.key);
  EXPECT_TRUE(absl::IsNotFound(best.status())) << best.status();
}

TEST_F(SqliteDatabaseTest, BestIsPerTarget) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo w = Workload("a");
  TargetInfo slow = Target("laptop");
  TargetInfo fast = Target("epyc");
  ASSERT_TRUE(db->Commit({Record(w, fast, {0.001}), Record(w, slow, {0.5})}).ok());

  absl::StatusOr<TuningRecord> best = db->Best(w.key, slow.key);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->target.key, slow.key);
  EXPECT_EQ(best->result.costs, std::vector<double>{0.5});

  // A target with no records of its own finds nothing, even though others have some.
  TargetInfo other = Target("arm-board");
  absl::StatusOr<TuningRecord> none = db->Best(w.key, other.key);
  ASSERT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(w.key));
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(other.key));
  ExpectOneLineNamingPath(none.status(), path_);
}

TEST_F(SqliteDatabaseTest, RecordsFiltersByEitherKey) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo a = Workload("a"), b = Workload("b");
  TargetInfo x = Target("x"), y = Target("y");
  ASSERT_TRUE(db->Commit({Record(a, x, {1}), Record(a, y, {1}), Record(b, x, {1})}).ok());
  ASSERT_TRUE(db->Commit({Record(b, y, {1}), Record(a, x, {2})}).ok());

  auto count = [&](const std::string& wk, const std::string& tk) -> size_t {
    absl::StatusOr<std::vector<TuningRecord>> rs = db->Records(wk, tk);
    EXPECT_TRUE(rs.ok()) << rs.status();
    for (size_t i = 1; rs.ok() && i < rs->size(); ++i) {
      EXPECT_LT((*rs)[i - 1].id, (*rs)[i].id) << "oldest first";
    }
    return rs.ok() ? rs->size() : 0;
  };
  EXPECT_EQ(count("", ""), 5u);
  EXPECT_EQ(count(a.key, ""), 3u);
  EXPECT_EQ(count("", x.key), 3u);
  EXPECT_EQ(count(a.key, x.key), 2u);
  EXPECT_EQ(count("no-such-workload", ""), 0u);

  absl::StatusOr<std::vector<TargetSummary>> targets = db->TargetsOf(a.key);
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->size(), 2u);
  EXPECT_EQ((*targets)[0].target.key, x.key);  // ordered by key
  EXPECT_EQ((*targets)[0].target.device_key, "x");
  EXPECT_EQ((*targets)[0].records, 2);
  EXPECT_EQ((*targets)[1].target.key, y.key);
  EXPECT_EQ((*targets)[1].records, 1);
}

TEST_F(SqliteDatabaseTest, FailedCommitRollsBackTheWholeBatch) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("epyc");
  ASSERT_TRUE(db->Commit({Record(w, t, {1.0})}).ok());

  // Records 0-2 insert fine (one under a new workload and target); record 3 is refused
  // only when its turn comes, inside the transaction, so the rows already written
  // must be undone.
  std::vector<TuningRecord> batch = {
      Record(w, t, {0.5}), Record(Workload("new"), Target("new"), {0.1}),
      Record(w, t, {0.2}), Record(w, t, {-1.0}),
      Record(w, t, {0.3}),
  };
  absl::StatusOr<std::vector<int64_t>> ids = db->Commit(batch);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status())) << ids.status();
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("record 3"));
  ExpectOneLineNamingPath(ids.status(), path_);

  absl::StatusOr<std::vector<TuningRecord>> all = db->Records("", "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
  absl::StatusOr<std::vector<WorkloadSummary>> list = db->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  EXPECT_EQ(db->Best(w.key, t.key)->result.costs, std::vector<double>{1.0});

  // A different task under an existing workload key is refused, also mid-batch.
  WorkloadInfo impostor = w;
  impostor.task_text = "conv2d N=1";
  ids = db->Commit({Record(w, t, {0.1}), Record(impostor, t, {0.1})});
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("already names"));
  EXPECT_EQ(db->Records("", "")->size(), 1u);

  ids = db->Commit({Record(impostor, t, {0.1})});
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status())) << ids.status();
  TargetInfo other_cpu = t;
  other_cpu.cpu = "skylake";
  ids = db->Commit({Record(w, other_cpu, {0.1})});
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("already names a different target"));
  EXPECT_EQ(db->Records("", "")->size(), 1u);

  // Non-finite costs cannot be stored in JSON or ranked.
  ids = db->Commit({Record(w, t, {std::nan("")})});
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status())) << ids.status();

  // The connection is usable afterwards: no transaction was left open.
  ids = db->Commit({Record(w, t, {0.4})});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(db->Records("", "")->size(), 2u);
}

TEST_F(SqliteDatabaseTest, SqliteFailureMidBatchRollsBack) {
  // Fault injection with real SQLite: a trigger makes the third INSERT fail inside
  // SQLite itself, after two rows (and a new workload) were written.
  ASSERT_NE(OpenOrDie(), nullptr);
  RawSql(path_,
         "CREATE TRIGGER inject_failure BEFORE INSERT ON records "
         "WHEN NEW.config_json = 'boom' BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  std::unique_ptr<Database> db = OpenOrDie();
  TargetInfo t = Target("epyc");
  TuningRecord bad = Record(Workload("a"), t, {0.3});
  bad.config_json = "boom";
  absl::StatusOr<std::vector<int64_t>> ids =
      db->Commit({Record(Workload("a"), t, {0.1}), Record(Workload("b"), t, {0.2}), bad});
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("injected failure"));
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("record 2"));
  ExpectOneLineNamingPath(ids.status(), path_);
  EXPECT_TRUE(db->Records("", "")->empty());
  EXPECT_TRUE(db->List()->empty());
  EXPECT_EQ(RawQueryText(path_, "SELECT count(*) FROM workloads"), "0");

  ids = db->Commit({Record(Workload("a"), t, {0.1})});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(db->Records("", "")->size(), 1u);
}

TEST_F(SqliteDatabaseTest, ReopenKeepsDataAndReadOnlyRefusesWrites) {
  WorkloadInfo w = Workload("a");
  TargetInfo t = Target("epyc");
  {
    std::unique_ptr<Database> db = OpenOrDie();
    ASSERT_TRUE(db->Commit({Record(w, t, {2.0}), Record(w, t, {1.0})}).ok());
    JobRow job;
    job.id = "job-1";
    job.state = "succeeded";
    ASSERT_TRUE(db->PutJob(job).ok());
  }
  {
    std::unique_ptr<Database> db = OpenOrDie();
    EXPECT_EQ(db->Records("", "")->size(), 2u);
    EXPECT_EQ(db->Best(w.key, t.key)->result.costs, std::vector<double>{1.0});
    EXPECT_EQ(db->GetJob("job-1")->state, "succeeded");
  }
  DatabaseOptions options;
  options.path = path_;
  options.read_only = true;
  std::unique_ptr<Database> ro = OpenOrDie(options);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->Records("", "")->size(), 2u);
  absl::StatusOr<std::vector<int64_t>> ids = ro->Commit({Record(w, t, {0.1})});
  EXPECT_TRUE(absl::IsFailedPrecondition(ids.status())) << ids.status();
  ExpectOneLineNamingPath(ids.status(), path_);
  JobRow job;
  job.id = "job-2";
  EXPECT_FALSE(ro->PutJob(job).ok());
  EXPECT_EQ(ro->Records("", "")->size(), 2u);
}

TEST_F(SqliteDatabaseTest, NewerSchemaIsRefusedAndFileUntouched) {
  ASSERT_NE(OpenOrDie(), nullptr);
  RawSql(path_,
         "INSERT INTO schema_migrations (version, applied_unix_us, description) "
         "VALUES (7, 0, 'from the future')");
  const std::string before = ReadBytes(path_);
  ASSERT_FALSE(before.empty());

  for (bool read_only : {false, true}) {
    DatabaseOptions options;
    options.path = path_;
    options.read_only = read_only;
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(options);
    ASSERT_FALSE(db.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(db.status())) << db.status();
    EXPECT_THAT(std::string(db.status().message()),
                HasSubstr("written by a newer tuneforge (schema 7, this build knows 6)"));
    ExpectOneLineNamingPath(db.status(), path_);
  }
  EXPECT_EQ(ReadBytes(path_), before);
}

TEST_F(SqliteDatabaseTest, EmptyFileBecomesANewDatabase) {
  // SQLite itself creates new databases as empty files, e.g. after `touch tuning.db`.
  WriteBytes(path_, "");
  DatabaseOptions read_only;
  read_only.path = path_;
  read_only.read_only = true;
  absl::StatusOr<std::unique_ptr<Database>> ro = Database::Open(read_only);
  EXPECT_TRUE(absl::IsFailedPrecondition(ro.status())) << ro.status();
  ExpectOneLineNamingPath(ro.status(), path_);
  std::unique_ptr<Database> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->SchemaVersion(), 6);
}

TEST_F(SqliteDatabaseTest, ConcurrentOpensOfANewFileMigrateOnce) {
  std::vector<std::unique_ptr<Database>> dbs(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < dbs.size(); ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({path_});
      EXPECT_TRUE(db.ok()) << db.status();
      if (db.ok()) dbs[i] = std::move(db).value();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::unique_ptr<Database>& db : dbs) {
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(db->SchemaVersion(), 6);
  }
  EXPECT_EQ(RawQueryText(path_, "SELECT count(*) FROM schema_migrations"), "6");
}

TEST_F(SqliteDatabaseTest, NonSqliteFilesAreRefusedAndUntouched) {
  std::mt19937 rng(42);
  std::string random_bytes(8192, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  const std::vector<std::string> contents = {
      random_bytes,
      "tile_m=32\ntile_n=64\n",  // a config file given by mistake
      "SQL",                     // shorter than the SQLite header
      std::string("SQLite format 3\0", 16) + std::string(4080, '\x5a'),  // header, then junk
  };
  for (const std::string& bytes : contents) {
    WriteBytes(path_, bytes);
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({path_});
    ASSERT_FALSE(db.ok()) << "accepted " << bytes.substr(0, 16);
    EXPECT_THAT(std::string(db.status().message()), HasSubstr("is not a tuneforge database"));
    ExpectOneLineNamingPath(db.status(), path_);
    EXPECT_EQ(ReadBytes(path_), bytes) << "file was modified";
    EXPECT_FALSE(fs::exists(path_ + "-wal"));
    EXPECT_FALSE(fs::exists(path_ + "-journal"));
  }
  WriteBytes(path_, random_bytes);
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({path_});
  EXPECT_THAT(std::string(db.status().message()),
              HasSubstr(path_ + " is not a tuneforge database (file is not a SQLite database)"));
}

TEST_F(SqliteDatabaseTest, ForeignSqliteDatabaseIsRefusedAndUntouched) {
  RawSql(path_,
         "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); "
         "INSERT INTO photos (name) VALUES ('cat.jpg');");
  std::string before = ReadBytes(path_);
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({path_});
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(db.status())) << db.status();
  EXPECT_THAT(std::string(db.status().message()),
              HasSubstr("is a SQLite database but not a tuneforge database"));
  ExpectOneLineNamingPath(db.status(), path_);
  EXPECT_EQ(ReadBytes(path_), before);

  // Another application's id with no tables yet is still not ours.
  fs::remove(path_);
  RawSql(path_, "PRAGMA application_id = 1234; PRAGMA user_version = 1;");
  before = ReadBytes(path_);
  db = Database::Open({path_});
  EXPECT_THAT(std::string(db.status().message()),
              HasSubstr("is a SQLite database but not a tuneforge database"));
  EXPECT_EQ(ReadBytes(path_), before);
}

TEST_F(SqliteDatabaseTest, PathErrors) {
  const std::string missing_dir = (fs::path(dir_) / "no" / "such").string();
  const std::string in_missing_dir = missing_dir + "/tuning.db";
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({in_missing_dir});
  ASSERT_FALSE(db.ok());
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(missing_dir));
  EXPECT_THAT(std::string(db.status().message()), HasSubstr("does not exist"));
  ExpectOneLineNamingPath(db.status(), in_missing_dir);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "no")) << "Open must not create directories";

  EXPECT_TRUE(absl::IsInvalidArgument(Database::Open({""}).status()));

  DatabaseOptions read_only;
  read_only.path = path_;
  read_only.read_only = true;
  db = Database::Open(read_only);
  EXPECT_TRUE(absl::IsNotFound(db.status())) << db.status();
  ExpectOneLineNamingPath(db.status(), path_);

  DatabaseOptions no_create;
  no_create.path = path_;
  no_create.create_if_missing = false;
  db = Database::Open(no_create);
  EXPECT_TRUE(absl::IsNotFound(db.status())) << db.status();
  EXPECT_FALSE(fs::exists(path_));

  db = Database::Open({dir_});
  EXPECT_TRUE(absl::IsInvalidArgument(db.status())) << db.status();
  ExpectOneLineNamingPath(db.status(), dir_);
}

TEST_F(SqliteDatabaseTest, ConcurrentCommitsAllLand) {
  std::unique_ptr<Database> db = OpenOrDie();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  std::vector<std::vector<int64_t>> ids(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      // Each thread has its own workload so the upserts of new keys race too.
      WorkloadInfo w = Workload("thread" + std::to_string(i));
      for (int j = 0; j < kPerThread; ++j) {
        absl::StatusOr<std::vector<int64_t>> got =
            db->Commit({Record(w, Target("epyc"), {1.0 + j})});
        if (!got.ok()) {
          ++failures;
          continue;
        }
        ids[i].push_back(got->front());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<int64_t> unique;
  for (const std::vector<int64_t>& v : ids) unique.insert(v.begin(), v.end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread));
  absl::StatusOr<std::vector<TuningRecord>> all = db->Records("", "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kPerThread));
  absl::StatusOr<std::vector<WorkloadSummary>> list = db->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), static_cast<size_t>(kThreads));
  for (const WorkloadSummary& s : *list) EXPECT_EQ(s.records, kPerThread);
}

TEST_F(SqliteDatabaseTest, TwoConnectionsToOneFileBothWrite) {
  // As two processes would (a server and a CLI import): SQLite's file locks plus the
  // busy timeout serialise them.
  std::unique_ptr<Database> first = OpenOrDie();
  std::unique_ptr<Database> second = OpenOrDie();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::atomic<int> failures{0};
  auto writer = [&](Database* db, const std::string& name) {
    for (int j = 0; j < 100; ++j) {
      if (!db->Commit({Record(Workload(name), Target("epyc"), {1.0})}).ok()) ++failures;
    }
  };
  std::thread a(writer, first.get(), "a");
  std::thread b(writer, second.get(), "b");
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(first->Records("", "")->size(), 200u);
  EXPECT_EQ(second->Records("", "")->size(), 200u);
}

TEST_F(SqliteDatabaseTest, JobsUpsertGetList) {
  std::unique_ptr<Database> db = OpenOrDie();
  JobRow job{"job-b", "alice", R"({"task":"matmul"})", "queued", "", 200, 200};
  ASSERT_TRUE(db->PutJob(job).ok());
  ASSERT_TRUE(db->PutJob(JobRow{"job-a", "bob", "{}", "running", "", 100, 150}).ok());

  job.state = "failed";
  job.message = "agent lost";
  job.updated_unix_us = 300;
  job.created_unix_us = 300;  // a later write does not move the creation time
  ASSERT_TRUE(db->PutJob(job).ok());

  absl::StatusOr<JobRow> got = db->GetJob("job-b");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->owner, "alice");
  EXPECT_EQ(got->spec_json, R"({"task":"matmul"})");
  EXPECT_EQ(got->state, "failed");
  EXPECT_EQ(got->message, "agent lost");
  EXPECT_EQ(got->created_unix_us, 200);
  EXPECT_EQ(got->updated_unix_us, 300);

  absl::StatusOr<std::vector<JobRow>> jobs = db->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "job-a");  // oldest first
  EXPECT_EQ((*jobs)[1].id, "job-b");

  absl::StatusOr<JobRow> missing = db->GetJob("job-zzz");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("job-zzz"));
  EXPECT_TRUE(absl::IsInvalidArgument(db->PutJob(JobRow{})));

  // Records point at jobs by id only: one of an unknown job is fine.
  TuningRecord r = Record(Workload("a"), Target("epyc"), {1.0});
  r.job_id = "job-deleted-long-ago";
  EXPECT_TRUE(db->Commit({r}).ok());
}

TEST_F(SqliteDatabaseTest, ListSummarisesEachWorkloadTargetPair) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo a = Workload("a"), b = Workload("b");
  TargetInfo x = Target("x"), y = Target("y");
  ASSERT_TRUE(db->Commit({
                             Record(a, x, {3.0}),
                             Record(a, x, {1.0}),
                             Record(a, x, {0.1}, MeasureErrorKind::kWrongAnswer),
                             Record(a, x, {}, MeasureErrorKind::kBuildTimeout),
                             Record(a, y, {}, MeasureErrorKind::kRunTimeout),
                             Record(b, x, {5.0}),
                         })
                  .ok());
  absl::StatusOr<std::vector<WorkloadSummary>> list = db->List();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);

  const WorkloadSummary& ax = (*list)[0];
  EXPECT_EQ(ax.workload.key, a.key);
  EXPECT_EQ(ax.workload.task_text, a.task_text);
  EXPECT_EQ(ax.workload.flops, a.flops);
  EXPECT_EQ(ax.target.key, x.key);
  EXPECT_EQ(ax.records, 4);
  EXPECT_EQ(ax.errors, 2);
  ASSERT_TRUE(ax.best.has_value());
  EXPECT_EQ(ax.best->result.costs, std::vector<double>{1.0});

  const WorkloadSummary& ay = (*list)[1];
  EXPECT_EQ(ay.target.key, y.key);
  EXPECT_EQ(ay.records, 1);
  EXPECT_EQ(ay.errors, 1);
  EXPECT_FALSE(ay.best.has_value());

  const WorkloadSummary& bx = (*list)[2];
  EXPECT_EQ(bx.workload.key, b.key);
  EXPECT_EQ(bx.records, 1);
  EXPECT_EQ(bx.errors, 0);
  ASSERT_TRUE(bx.best.has_value());
  EXPECT_EQ(bx.best->result.costs, std::vector<double>{5.0});
}

TEST_F(SqliteDatabaseTest, BestPageFiltersOrdersAndPages) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo a = Workload("a"), b = Workload("b"), c = Workload("c");
  c.op = "conv2d";
  TargetInfo x = Target("x"), y = Target("y");
  ASSERT_TRUE(db->Commit({
                             Record(a, x, {3.0}),
                             Record(a, x, {1.0}),
                             Record(a, x, {0.1}, MeasureErrorKind::kWrongAnswer),
                             Record(a, y, {}, MeasureErrorKind::kRunTimeout),  // no best: left out
                             Record(b, x, {5.0}),
                             Record(b, y, {6.0}),
                             Record(c, x, {7.0}),
                         })
                  .ok());
  BestPageQuery q;
  absl::StatusOr<std::vector<BestEntry>> all = db->BestPage(q);
  ASSERT_TRUE(all.ok()) << all.status();
  // conv2d before matmul; within matmul by workload key, then target key.
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].workload.key, c.key);
  EXPECT_EQ((*all)[1].workload.key, a.key);
  EXPECT_EQ((*all)[1].target.key, x.key);
  EXPECT_EQ((*all)[1].best.record.result.costs, std::vector<double>{1.0});
  EXPECT_EQ((*all)[1].best.median_cost, 1.0);
  EXPECT_EQ((*all)[2].target.key, x.key);
  EXPECT_EQ((*all)[3].target.key, y.key);
  EXPECT_EQ((*all)[3].best.record.result.costs, std::vector<double>{6.0});

  q.op = "matmul";
  q.limit = 2;
  q.offset = 1;
  absl::StatusOr<std::vector<BestEntry>> page = db->BestPage(q);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].workload.key, b.key);
  EXPECT_EQ((*page)[1].workload.key, b.key);
  q = BestPageQuery();
  q.target_key = y.key;
  ASSERT_EQ(db->BestPage(q)->size(), 1u);
  q.target_key = "no such target";
  ASSERT_EQ(db->BestPage(q)->size(), 0u);

  q = BestPageQuery();
  q.limit = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(db->BestPage(q).status()));
  q.limit = 10;
  q.offset = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(db->BestPage(q).status()));
}

TEST_F(SqliteDatabaseTest, RecordByIdAndJobRecords) {
  std::unique_ptr<Database> db = OpenOrDie();
  WorkloadInfo a = Workload("a"), b = Workload("b");
  TargetInfo x = Target("x");
  std::vector<TuningRecord> records = {Record(a, x, {2.0}), Record(b, x, {}, MeasureErrorKind::kBuildError),
                                       Record(a, x, {1.0}), Record(a, x, {4.0})};
  records[0].job_id = "job-1";
  records[1].job_id = "job-1";
  records[2].job_id = "job-2";
  records[3].job_id = "job-1";
  absl::StatusOr<std::vector<int64_t>> ids = db->Commit(records);
  ASSERT_TRUE(ids.ok()) << ids.status();

  absl::StatusOr<TuningRecord> second = db->RecordById((*ids)[1]);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->workload.key, b.key);
  EXPECT_EQ(second->result.error, MeasureErrorKind::kBuildError);
  EXPECT_TRUE(absl::IsNotFound(db->RecordById(999999).status()));

  const std::vector<std::string> both = {a.key, b.key};
  auto query = [](const std::string& job, std::vector<std::string> keys, int64_t since, int64_t limit,
                  int64_t after = 0) { return JobRecordsQuery{job, std::move(keys), since, after, limit}; };
  absl::StatusOr<std::vector<JobRecordPoint>> job = db->JobRecords(query("job-1", both, 0, 100));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->size(), 3u);
  EXPECT_EQ((*job)[0].record_id, (*ids)[0]);
  EXPECT_EQ((*job)[0].median_cost, 2.0);
  EXPECT_EQ((*job)[1].workload_key, b.key);
  EXPECT_EQ((*job)[1].error, MeasureErrorKind::kBuildError);
  EXPECT_TRUE(std::isinf((*job)[1].median_cost));
  EXPECT_EQ((*job)[2].record_id, (*ids)[3]);
  EXPECT_EQ(db->JobRecords(query("job-1", both, 0, 2))->size(), 2u);
  EXPECT_EQ(db->JobRecords(query("job-1", {a.key}, 0, 100))->size(), 2u);  // only the workloads named
  EXPECT_EQ(db->JobRecords(query("job-1", both, records[3].result.start_unix_us, 100))->size(), 1u);
  absl::StatusOr<std::vector<JobRecordPoint>> after = db->JobRecords(query("job-1", both, 0, 100, (*ids)[0]));
  ASSERT_EQ(after->size(), 2u);  // the ones after the first
  EXPECT_EQ((*after)[0].record_id, (*ids)[1]);
  EXPECT_TRUE(db->JobRecords(query("job-3", both, 0, 10))->empty());
  EXPECT_TRUE(db->JobRecords(query("job-1", {"never-measured"}, 0, 10))->empty());
  EXPECT_TRUE(absl::IsInvalidArgument(db->JobRecords(query("job-1", both, 0, 0)).status()));
}

TEST_F(SqliteDatabaseTest, CostModelBlobsRoundTripThroughTheFile) {
  // Every byte value, NULs included, and more than one page.
  std::string bytes;
  std::mt19937 rng(7);
  for (int i = 0; i < 300000; ++i) bytes.push_back(static_cast<char>(rng() & 0xff));
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  {
    std::unique_ptr<Database> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    absl::StatusOr<std::optional<std::string>> missing = db->LoadModel("matmul_cpu/v1/t");
    ASSERT_TRUE(missing.ok()) << missing.status();
    EXPECT_FALSE(missing->has_value());
    ASSERT_TRUE(db->SaveModel("matmul_cpu/v1/t", "old").ok());
    ASSERT_TRUE(db->SaveModel("matmul_cpu/v1/t", bytes).ok());  // replaces
    ASSERT_TRUE(db->SaveModel("empty", "").ok());
    EXPECT_TRUE(absl::IsInvalidArgument(db->SaveModel("", "x")));
    EXPECT_TRUE(absl::IsInvalidArgument(db->LoadModel("").status()));
    EXPECT_EQ(db->Stats()->cost_models, 2);
  }
  DatabaseOptions read_only;
  read_only.path = path_;
  read_only.read_only = true;
  std::unique_ptr<Database> db = OpenOrDie(read_only);
  ASSERT_NE(db, nullptr);
  absl::StatusOr<std::optional<std::string>> got = db->LoadModel("matmul_cpu/v1/t");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_TRUE(**got == bytes) << "sizes " << (*got)->size() << " vs " << bytes.size();
  absl::StatusOr<std::optional<std::string>> empty = db->LoadModel("empty");
  ASSERT_TRUE(empty.ok() && empty->has_value());
  EXPECT_EQ(**empty, "");
  absl::Status refused = db->SaveModel("matmul_cpu/v1/t", "x");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  ExpectOneLineNamingPath(refused, path_);
}

}  // namespace
}  // namespace tuneforge
