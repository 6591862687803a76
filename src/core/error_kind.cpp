#include "core/error_kind.hpp"

#include "antdt/error.hpp"

namespace antdt::detail {

ErrorKind error_kind(const std::exception& e) noexcept {
  // Most derived first: a CheckpointError is a FileError, a WriteError too.
  if (dynamic_cast<const CheckpointError*>(&e)) return ErrorKind::checkpoint;
  if (dynamic_cast<const WriteError*>(&e)) return ErrorKind::write;
  if (dynamic_cast<const FileError*>(&e)) return ErrorKind::file;
  if (dynamic_cast<const UsageError*>(&e)) return ErrorKind::usage;
  if (dynamic_cast<const NonFiniteError*>(&e)) return ErrorKind::non_finite;
  if (dynamic_cast<const StallError*>(&e)) return ErrorKind::stall;
  if (dynamic_cast<const DeviceError*>(&e)) return ErrorKind::device;
  return ErrorKind::runtime;
}

namespace {
template <class E>
[[noreturn]] void raise(const std::string& what, bool heard) {
  E e(what);
  e.set_shared(true, heard);
  throw e;
}
}  // namespace

void throw_shared_error(ErrorKind kind, const std::string& what, bool heard) {
  switch (kind) {
    case ErrorKind::usage:
      raise<UsageError>(what, heard);
    case ErrorKind::file:
      raise<FileError>(what, heard);
    case ErrorKind::checkpoint:
      raise<CheckpointError>(what, heard);
    case ErrorKind::write:
      raise<WriteError>(what, heard);
    case ErrorKind::non_finite:
      raise<NonFiniteError>(what, heard);
    case ErrorKind::stall: {
      StallError e(what, !heard);
      e.set_shared(true, heard);
      throw e;
    }
    case ErrorKind::device:
      raise<DeviceError>(what, heard);
    case ErrorKind::runtime:
      break;
  }
  raise<Error>(what, heard);
}

}  // namespace antdt::detail
