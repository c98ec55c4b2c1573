// Names the calling thread as `top -H`, perf and gdb show it (Linux keeps 15
// characters; longer names are cut). Threads started inside a gRPC handler would
// otherwise all show as "grpcpp_sync_ser", whatever they do.
#pragma once

#include <pthread.h>

#include <string>

namespace tuneforge {

inline void SetThreadName(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace tuneforge
