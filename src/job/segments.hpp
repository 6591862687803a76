// Private: a run's segments (docs/job.md, "Segments"). A run that stops (exit 76, a requeue)
// or dies and is resumed from its checkpoint directory goes on in a new process: a new
// segment, often under the same Slurm job id and so the same %j output paths. Rank 0 counts
// the segments in <checkpoint dir>/antdt-segments and, before a resumed segment opens its
// outputs, moves an earlier segment's file aside (summary-4.json -> summary-4.seg1.json), so
// that every segment's summary, metrics and timeline are kept.
#pragma once

#include <string>

namespace antdt::detail {

inline constexpr const char* kSegmentsFile = "antdt-segments";

// Rank 0, as the run starts training: the number of the segment starting, recorded in `dir`:
// 1 for a fresh run, the recorded one + 1 on a resume (a resume with none recorded: 2).
// WriteError (exit 3) when the record cannot be written (atomically, cli::write_file_atomically).
int begin_segment(const std::string& dir, bool resumed);

// `path` with ".seg<segment>" before its extension: ("out/summary-4.json", 1) ->
// "out/summary-4.seg1.json"; ("metrics", 2) -> "metrics.seg2".
[[nodiscard]] std::string segment_path(const std::string& path, int segment);

// An output of segment `earlier` (or before) found where a resumed segment is about to write:
// if `path` is a regular file, renames it to segment_path(path, earlier) or, that name taken,
// the first free of "summary-4.seg1.2.json", ".3", ... Returns the new name, or ""
// when there was nothing to keep (no file, or not a regular file: /dev/null, a link).
// WriteError (exit 3) when the rename fails.
std::string keep_earlier_output(const std::string& path, int earlier);

}  // namespace antdt::detail
