// Private: a job's kill-restart bookkeeping in the checkpoint directory (docs/nd.md). Rank 0 only.
//
//   antdt-restart-exclude   the nodes to leave out when the job is resubmitted, one per line;
//                           each restart, and each stall whose node is known, adds its nodes
//                           (scripts/slurm/antdt.sbatch reads it)
//   antdt-restart-pending   written at a restart exit: the wall-clock second it exited
//   antdt-restart-history   one line per restart, written by the resumed job: the seconds from
//                           that exit to its start (the queue wait and launch, measured)
#pragma once

#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "antdt/options.hpp"

namespace antdt::detail {

inline constexpr const char* kRestartExcludeFile = "antdt-restart-exclude";
inline constexpr const char* kRestartPendingFile = "antdt-restart-pending";
inline constexpr const char* kRestartHistoryFile = "antdt-restart-history";

// At the start of a resumed job: turns a pending restart into a measured relaunch in the
// history. Returns the median relaunch of every restart so far (0 when none was measured).
double note_relaunch(const std::string& dir);

// At a restart exit: adds the decision's nodes (or ranks, without node names) to the exclude
// file and marks the restart pending. FileError when the files cannot be written.
void record_restart_exit(const std::string& dir, const RestartDecision& decision);

// At a stall (exit 5), on the rank that saw it first-hand (stall.first_hand()): adds the
// stalled ranks' nodes (stall.nodes()) to the exclude file, so that the resubmission leaves
// them out. Writes nothing without a directory, on another rank, or when the nodes are unknown;
// a file that cannot be written is a warning, so that the stall keeps its exit code.
void record_stalled_nodes(const std::string& dir, const StallError& stall);

// The checkpoint directory of the process's Job, for antdt::run_main: a StallError that ends
// the program, in any phase, records its nodes there (record_stalled_nodes). The Job sets it
// once it owns the directory, and clears it when it ends without an exception in flight.
void set_stall_record_dir(const std::string& dir);
[[nodiscard]] std::string stall_record_dir();

}  // namespace antdt::detail
