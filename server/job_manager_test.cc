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

}  // namespace
}  // namespace tuneforge
