// Private: what antdt's own programs (antdt-train, the framework adapters) reach past the
// public Job API for. Not installed.
#pragma once

#include <functional>

#include "antdt/job.hpp"
#include "checkpoint/checkpoint.hpp"
#include "session/session.hpp"

namespace antdt::detail {

// A part of every checkpoint that the program writes and reads itself (antdt-train's model,
// whose entries predate add_state):
//  - save: rank 0, into the checkpoint being written;
//  - check: rank 0, on a resume, before anything is restored (CheckpointError when the
//    checkpoint does not fit this run);
//  - restore: every rank, with rank 0's reader (null elsewhere); collective.
struct CheckpointPart {
  std::function<void()> prepare;  // every rank, before a checkpoint is written or read (may be empty)
  std::function<void(CheckpointWriter&)> save;
  std::function<void(const CheckpointReader&)> check;
  std::function<void(const CheckpointReader*)> restore;
};

// The Job's checks of its options (Job's constructor makes them too) for a program that wants
// them before it reads anything: `dataset_known` false skips the data set's size.
void validate_job_options(const JobOptions& options, int world, bool dataset_known);

// The Job's checks of its output paths (agreed over `comm`), for a program that wants them
// before it reads anything.
void check_job_outputs(const JobOptions& options, MPI_Comm comm);

struct JobAccess {
  static Session& session(Job& job);
  static void add_checkpoint_part(Job& job, CheckpointPart part);
  // The seconds this process took to start before the Job (MPI's start, the data's read): the
  // measured part of a kill-restart's cost.
  static void set_start_seconds(Job& job, double seconds);
};

}  // namespace antdt::detail
