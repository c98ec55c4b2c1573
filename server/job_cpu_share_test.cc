// JobCpuShare: never more holders than shares, and a paused holder lets another in.
#include "server/job_cpu_share.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tuneforge {
namespace {

TEST(JobCpuShareTest, NeverMoreHoldersThanShares) {
  for (int shares : {1, 2, 3}) {
    JobCpuShare share(shares);
    std::atomic<int> holders{0}, most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          JobCpuShare::Hold hold(&share);
          int now = ++holders;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::yield();
          --holders;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LE(most.load(), shares) << shares << " share(s)";
    EXPECT_GE(most.load(), 1);
  }
}

// One share: a holder that pauses (waits for its batch) lets a second job work, and
// takes the share back once that job is done. Without the hand-back this deadlocks.
TEST(JobCpuShareTest, PauseHandsTheShareToAnotherJob) {
  JobCpuShare share(1);
  std::atomic<bool> other_worked{false};
  {
    JobCpuShare::Hold mine(&share);
    JobCpuShare::Pause waiting(&share);
    std::thread other([&] {
      JobCpuShare::Hold theirs(&share);
      other_worked = true;
    });
    other.join();
  }
  EXPECT_TRUE(other_worked.load());
  // Both gave their share back: it can be taken again.
  JobCpuShare::Hold again(&share);
}

TEST(JobCpuShareTest, NullShareIsANoOp) {
  JobCpuShare::Hold hold(nullptr);
  JobCpuShare::Pause pause(nullptr);
}

}  // namespace
}  // namespace tuneforge
