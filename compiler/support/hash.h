// Content hashes used for workload keys and artifact integrity checks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tuneforge {

// FNV-1a, 64 bit. Not cryptographic: it detects corruption and names content, it
// does not defend against an attacker who can choose the bytes (see docs/security.md
// once the farm issue lands authentication).
uint64_t Fnv1a64(std::string_view data);
// 16 lowercase hex digits of Fnv1a64(data).
std::string HashHex(std::string_view data);

// 128 random bits from the OS's entropy source, as 32 hex digits: session tokens, the
// embedded server's one-time tokens, a device run's nonce.
std::string RandomToken();

}  // namespace tuneforge
