// JobManager::Submit refuses bad measurement and policy options before any job starts.
#include "server/job_manager.h"

#include <gtest/gtest.h>

#include <cmath>

#include "compiler/support/files.h"

namespace tuneforge {
namespace {

TEST(JobManagerTest, SubmitRefusesBadMeasureOptions) {
  // A directory of its own: SQLite's -wal and -shm files go with it.
  absl::StatusOr<TempDir> dir = TempDir::Create("tf_jobs_unit");
  ASSERT_TRUE(dir.ok()) << dir.status();
  DatabaseOptions options;
  options.path = dir->File("jobs.db");
  auto db = Database::Open(options);
  ASSERT_TRUE(db.ok()) << db.status();
  AgentRegistry registry;
  {
    JobManager jobs(db->get(), &registry, nullptr);  // no job may start: no builder
    v1::JobSpec spec;
    spec.set_task("matmul M=8 N=8 K=8");
    spec.set_trials(4);
    spec.mutable_measure()->set_max_repeat(-1);
    absl::StatusOr<std::string> id = jobs.Submit(spec);
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("max_repeat must be 0..100, got -1"), std::string::npos)
        << id.status();
    spec.mutable_measure()->set_max_repeat(JobManager::kMaxRepeat + 1);
    EXPECT_FALSE(jobs.Submit(spec).ok());
    spec.mutable_measure()->set_max_repeat(7);
    for (double bad : {-0.1, 1.5, std::nan("")}) {
      spec.mutable_measure()->set_max_spread(bad);
      id = jobs.Submit(spec);
      ASSERT_FALSE(id.ok()) << bad;
      EXPECT_NE(id.status().message().find("max_spread must be 0..1"), std::string::npos)
          << id.status();
    }
    spec.mutable_measure()->set_max_spread(0.05);
    for (int bad : {-1, 1025}) {
      spec.set_model_early_batch(bad);
      id = jobs.Submit(spec);
      ASSERT_FALSE(id.ok()) << bad;
      EXPECT_NE(id.status().message().find("model_early_batch must be 0..1024"), std::string::npos)
          << id.status();
    }
    EXPECT_TRUE(jobs.List().empty());
  }
}

// No silent resume failure: a stored running job whose spec no longer reads is marked
// failed with the reason (not left "running" in `jobs list` forever), and nothing
// starts for it.
TEST(JobManagerTest, UnreadableStoredJobIsMarkedFailed) {
  absl::StatusOr<TempDir> dir = TempDir::Create("tf_jobs_resume");
  ASSERT_TRUE(dir.ok()) << dir.status();
  DatabaseOptions options;
  options.path = dir->File("jobs.db");
  auto db = Database::Open(options);
  ASSERT_TRUE(db.ok()) << db.status();
  JobRow row;
  row.id = "j-broken";
  row.spec_json = "{\"task\": \"conv9d M=1\"}";
  row.state = "running";
  row.created_unix_us = row.updated_unix_us = 1;
  ASSERT_TRUE((*db)->PutJob(row).ok());
  AgentRegistry registry;
  JobManager jobs(db->get(), &registry, nullptr);
  absl::StatusOr<int> resumed = jobs.ResumeStoredJobs();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(*resumed, 0);
  EXPECT_TRUE(jobs.List().empty());
  absl::StatusOr<JobRow> stored = (*db)->GetJob("j-broken");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->state, "failed");
  EXPECT_NE(stored->message.find("not resumed after a server restart"), std::string::npos) << stored->message;
}

}  // namespace
}  // namespace tuneforge
