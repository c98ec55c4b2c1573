// db_crash_writer PATH RUN: writes batches of records to PATH as fast as it can and,
// after each Insert returns OK, prints "committed RUN FIRST LAST" (the batch's
// sequence numbers). db/crash_test.cc kill -9s it at random moments and then checks
// that every batch reported here is in the file.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "db/database.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: db_crash_writer PATH RUN\n");
    return 2;
  }
  tuneforge::DatabaseOptions options;
  options.path = argv[1];
  auto db = tuneforge::Database::Open(options);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", std::string(db.status().message()).c_str());
    return 1;
  }
  const std::string run = argv[2];
  tuneforge::WorkloadInfo w{"wl-crash", "matmul", "matmul crash", "{}", 1.0};
  tuneforge::TargetInfo t{"tk-crash", "x86_64", "cpu", "", 1, "crash"};
  for (int64_t seq = 0;;) {
    std::vector<tuneforge::TuningRecord> batch;
    const int64_t first = seq;
    for (int i = 0; i < 50; ++i, ++seq) {
      tuneforge::TuningRecord r;
      r.workload = w;
      r.target = t;
      r.template_name = "matmul_cpu";
      r.template_version = 1;
      r.config_json = "{\"run\":" + run + ",\"seq\":" + std::to_string(seq) + "}";
      r.result.costs = {1.0 + static_cast<double>(seq % 7)};
      r.result.start_unix_us = seq;
      r.result.agent_id = "run-" + run;
      r.result.error_message = std::string(200, 'z');
      batch.push_back(r);
    }
    auto ids = (*db)->Insert(batch);
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ids.status().message()).c_str());
      return 1;
    }
    std::printf("committed %s %lld %lld\n", run.c_str(), static_cast<long long>(first),
                static_cast<long long>(seq - 1));
    std::fflush(stdout);
  }
}
