// Private: the names of the files the checkpoint store keeps in a checkpoint directory beside
// the checkpoints themselves (docs/checkpoint.md).
#pragma once

namespace antdt::detail {

inline constexpr const char* kCheckpointLockFile = "antdt.lock";      // CheckpointDirectoryLock
inline constexpr const char* kRunIdentityFile = "antdt-run";          // RunIdentity
inline constexpr const char* kRunIdentityTmpFile = ".antdt-run.tmp";  // its atomic write

}  // namespace antdt::detail
