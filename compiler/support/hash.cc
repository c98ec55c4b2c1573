#include "compiler/support/hash.h"

#include <cstdio>

namespace tuneforge {

uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string HashHex(std::string_view data) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Fnv1a64(data)));
  return buf;
}

}  // namespace tuneforge
