// The tuneforge and tuneforge-server binaries run on jemalloc rather than glibc's
// malloc. The search lowers, extracts features from and frees thousands of small IR
// trees per second on two threads; under glibc a third of CostModel::Predict's CPU
// went to malloc/free and coalescing the freed nodes (malloc_consolidate), and conv2d
// 64->64 3x3 @56^2 scored 24,000 candidates/s; under jemalloc 32,000
// (docs/search.md "Scoring cost").
#pragma once

#include <string>

namespace tuneforge {

// "jemalloc <version>": the allocator this process runs on. Printed by `tuneforge
// version` and by the server at start (debug log), which also keeps the library
// linked.
std::string AllocatorName();

}  // namespace tuneforge
