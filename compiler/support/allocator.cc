// jemalloc as the binaries' allocator, and its settings.
#include "compiler/support/allocator.h"

#include <jemalloc/jemalloc.h>

namespace tuneforge {

std::string AllocatorName() {
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) != 0 || version == nullptr)
    return "jemalloc (version unknown)";
  return std::string("jemalloc ") + version;
}

}  // namespace tuneforge
