// The runtime's source text, embedded at build time (deploy/CMakeLists.txt), so a
// deployed library carries exactly the thread pool the kernels were measured with.
#pragma once

#include <string>

namespace tuneforge::deploy {
const std::string& ThreadPoolSource();   // compiler/runtime/thread_pool.cc
const std::string& RuntimeHeaderSource();  // compiler/runtime/runtime.h
}  // namespace tuneforge::deploy
