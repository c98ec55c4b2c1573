// absl::Status -> grpc::Status for the services' handlers: the codes a client acts on
// (invalid argument, not found, failed precondition, cancelled, unavailable) kept,
// every other failure INTERNAL, the message as it is.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tuneforge {

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace tuneforge
