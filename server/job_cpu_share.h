// JobCpuShare: how many job threads do CPU work (propose, build, commit records) at
// once. A job thread holds one share while it works and gives it back while it waits
// for its batch's results (AgentRunner::Measure) or for an agent.
//
// Why: the job threads run at nice 10 so that dispatch (the agents' streams) goes
// first, but nice is per thread: ten jobs proposing their first batches at once
// weighed as much as a dispatch thread and took half of a 2-core server, and the
// results arriving meanwhile queued behind them (the p99 of `bench farm`'s
// lease-to-result time came from that start-up burst). With the shares, the jobs
// together weigh as much as `shares` niced threads, whatever their number. A job's
// builder pool works inside its share, so one job still uses every core to build.
#pragma once

#include <condition_variable>
#include <mutex>

namespace tuneforge {

// Thread-safe.
class JobCpuShare {
 public:
  // REQUIRES: shares >= 1.
  explicit JobCpuShare(int shares) : free_(shares) {}

  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

  // Holds a share for its scope.
  class Hold {
   public:
    explicit Hold(JobCpuShare* share) : share_(share) {
      if (share_) share_->Acquire();
    }
    ~Hold() {
      if (share_) share_->Release();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    JobCpuShare* share_;
  };

  // Gives the caller's share back for its scope (a wait), takes one again at the end.
  class Pause {
   public:
    explicit Pause(JobCpuShare* share) : share_(share) {
      if (share_) share_->Release();
    }
    ~Pause() {
      if (share_) share_->Acquire();
    }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    JobCpuShare* share_;
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;  // GUARDED_BY(mu_)
};

}  // namespace tuneforge
