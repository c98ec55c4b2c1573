// Crash safety: a writer process is killed with SIGKILL at random moments, again and
// again, on the same file. Afterwards the file must pass PRAGMA integrity_check and
// hold every batch the writer reported as committed (and nothing twice).

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "db/database.h"
#include "gtest/gtest.h"

namespace tuneforge {
namespace {

namespace fs = std::filesystem;

// Runs the writer for `ms` milliseconds, SIGKILLs it, and returns its stdout.
std::string RunAndKill(const std::string& db, int run, int ms) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    std::string run_text = std::to_string(run);
    execl(TF_CRASH_WRITER, TF_CRASH_WRITER, db.c_str(), run_text.c_str(), nullptr);
    _exit(127);
  }
  close(out[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  kill(pid, SIGKILL);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "writer exited on its own: " << status;
  return text;
}

TEST(CrashTest, KillNineWhileWritingLosesNothingCommitted) {
  std::string pattern = (fs::path(::testing::TempDir()) / "tuneforge_crash_XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string path = pattern + "/crash.db";
  std::mt19937 rng(7);
  std::set<std::string> committed;
  constexpr int kRuns = 20;
  for (int run = 0; run < kRuns; ++run) {
    std::string out = RunAndKill(path, run, 60 + static_cast<int>(rng() % 140));
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (lines.eof()) break;  // a line cut by the kill has no newline: not a report
      int r = 0;
      long long first = 0, last = 0;
      if (std::sscanf(line.c_str(), "committed %d %lld %lld", &r, &first, &last) != 3) continue;
      for (long long s = first; s <= last; ++s) {
        committed.insert("{\"run\":" + std::to_string(r) + ",\"seq\":" + std::to_string(s) + "}");
      }
    }
  }
  ASSERT_FALSE(committed.empty()) << "the writer never committed; is it too slow to start?";

  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "ok");
  sqlite3_finalize(stmt);
  sqlite3_close(raw);

  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open({path});
  ASSERT_TRUE(db.ok()) << db.status();
  absl::StatusOr<std::vector<TuningRecord>> all = (*db)->Records("", "");
  ASSERT_TRUE(all.ok()) << all.status();
  std::set<std::string> stored;
  for (const TuningRecord& r : *all) {
    EXPECT_TRUE(stored.insert(r.config_json).second) << "stored twice: " << r.config_json;
  }
  size_t missing = 0;
  for (const std::string& c : committed) missing += stored.count(c) == 0;
  EXPECT_EQ(missing, 0u) << "of " << committed.size() << " committed records";
  // Whole batches only: a record count that is not a multiple of the batch size means a
  // transaction was torn.
  EXPECT_EQ(all->size() % 50, 0u);
  std::printf("%zu records committed over %d killed writers, %zu stored\n", committed.size(), kRuns,
              all->size());
  fs::remove_all(pattern);
}

}  // namespace
}  // namespace tuneforge
