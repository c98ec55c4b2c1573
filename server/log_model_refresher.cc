// LogModelRefresher: keeps the db's log models fresh in the background.
#include "server/log_model_refresher.h"

#include <sys/resource.h>

#include "compiler/support/log.h"

namespace tuneforge {

LogModelRefresher::LogModelRefresher(Database* db, LogModelRefresh options)
    : db_(db), options_(std::move(options)), thread_([this] { Loop(); }) {}

LogModelRefresher::~LogModelRefresher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LogModelRefresher::Request(const std::string& op, const std::string& target_key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert({op, target_key});
  }
  cv_.notify_all();
}

void LogModelRefresher::Loop() {
  // As nice as the job threads: training must not take cores from dispatch.
  setpriority(PRIO_PROCESS, 0, 10);  // this thread only (Linux: per-thread nice)
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left to do
    auto [op, target_key] = *queue_.begin();
    queue_.erase(queue_.begin());
    lock.unlock();
    LogModelRefresh refresh = options_;
    refresh.op = op;
    refresh.target_key = target_key;
    refresh.only_stale = true;
    absl::StatusOr<LogModelRefreshResult> r = RefreshLogModels(db_, refresh);
    if (!r.ok()) {
      TF_LOG(Warning) << "log model of " << op << " on " << target_key << ": " << r.status();
    } else {
      for (const LogModelInfo& i : r->trained)
        TF_LOG(Info) << "log model " << i.key << " retrained: " << i.records << " records of "
                     << i.tasks << " tasks in " << i.train_seconds << " s; " << i.dropped_total()
                     << " left out (" << i.ToJson() << ")";
    }
    lock.lock();
  }
}

}  // namespace tuneforge
