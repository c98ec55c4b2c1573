// DispatchObserver: what the dispatch path (AgentRegistry) tells the server's metrics
// and benchmarks, without either reaching into its locks or data structures.
#pragma once

#include "tuneforge/v1/common.pb.h"

namespace tuneforge {

// Called with the AgentRegistry's lock held: implementations must be quick and
// thread-safe, and must not call back into the registry.
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  // A request was leased to an agent: its first dispatch, or a re-dispatch after
  // its agent was lost.
  virtual void OnLease(bool redispatch) {}
  // A request ended: its agent's result was accepted, or it was given up as
  // agent_lost. `lease_seconds` runs from its (latest) lease to now.
  virtual void OnResult(v1::MeasureErrorKind error, double lease_seconds) {}
};

}  // namespace tuneforge
