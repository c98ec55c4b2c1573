// FNV-1a content hashes for workload keys and artifact integrity.
#include "compiler/support/hash.h"

#include <cstdio>
#include <random>

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

std::string RandomToken() {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4) out += kHex[v & 15];
  }
  return out;
}

}  // namespace tuneforge
