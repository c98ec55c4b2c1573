// libFuzzer target: what an agent decodes from the server's stream: a ServerMessage
// (protobuf) and, for a MeasureRequest, the checks the agent runs before it acts.
#include <cstddef>
#include <cstdint>

#include "measure_agent/sandbox.h"
#include "tuneforge/v1/agent.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tuneforge::v1::ServerMessage message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (message.has_request()) (void)tuneforge::agent::ValidateMeasureRequest(message.request());
  tuneforge::v1::MeasureRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) {
    (void)tuneforge::agent::ValidateMeasureRequest(request);
  }
  return 0;
}
