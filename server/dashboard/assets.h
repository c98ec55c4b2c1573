// The dashboard's static files, embedded in the binary at build time
// (server/dashboard/embed_assets.cmake writes assets.cc from assets/ and Chart.js).
#pragma once

#include <string_view>

namespace tuneforge {

struct Asset {
  const char* name;          // "app.js"
  const char* content_type;  // "text/javascript; charset=utf-8"
  std::string_view bytes;
};

// The embedded file of that name, nullptr when there is none.
const Asset* FindAsset(std::string_view name);

}  // namespace tuneforge
