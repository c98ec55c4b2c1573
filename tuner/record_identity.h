// Whether a record from outside (an imported or uploaded log line, a merged db) is
// what it says it is. db/ stores what it is given (it knows no tasks or targets), so
// every path that brings records in from outside passes this check first: `db import`,
// `db merge` and DatabaseService.Upload.
#pragma once

#include "absl/status/status.h"
#include "db/record.h"

namespace tuneforge {

// OK when the record's workload key, op, task text (canonical), task JSON and FLOP
// count are the ones its task text derives, its target key is the one its fields
// derive (with 1..Target::kMaxThreads threads), and a success's costs are positive,
// finite times. Otherwise InvalidArgument naming the first field that is not: an
// upload that names another task's key, or a FLOP count that would make a real
// record read as 1e24 GFLOP/s, is refused before anything is stored.
absl::Status CheckRecordIdentity(const TuningRecord& r);

}  // namespace tuneforge
