// LogModelRefresher: keeps the db's log models (tuner/log_model.h) fresh while the
// server runs. The JobManager asks after every job; one background thread retrains the
// (op, target) log model when enough new records arrived since it was trained
// (LogModelRefresh::only_stale), at the job threads' low priority.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "db/database.h"
#include "tuner/log_model.h"

namespace tuneforge {

// Thread-safe.
class LogModelRefresher {
 public:
  // `db` is not owned and must outlive the refresher.
  LogModelRefresher(Database* db, LogModelRefresh options);
  // Finishes the refreshes already asked for (each takes seconds at most), then stops.
  ~LogModelRefresher();

  // Queues a check of (op, target key); returns at once.
  void Request(const std::string& op, const std::string& target_key);

 private:
  void Loop();

  Database* db_;
  LogModelRefresh options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::pair<std::string, std::string>> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;                                     // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tuneforge
