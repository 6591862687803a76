// Private: RAII ownership of HDF5 identifiers. Every hid_t antdt opens is held by an
// H5Handle, so an exception on any path closes what was opened.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "antdt/error.hpp"

namespace antdt::detail {

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() noexcept = default;
  H5Handle(hid_t id, Closer closer) noexcept : id_(id), closer_(closer) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  ~H5Handle() { reset(); }

  [[nodiscard]] hid_t get() const noexcept { return id_; }
  [[nodiscard]] bool valid() const noexcept { return id_ >= 0; }
  void reset() noexcept { (void)close(); }
  // Closes now and returns the closer's result (negative: it failed; 0 when nothing was open).
  herr_t close() noexcept {
    const herr_t rc = id_ >= 0 && closer_ ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline H5Handle h5_file(hid_t id) { return {id, H5Fclose}; }
inline H5Handle h5_dataset(hid_t id) { return {id, H5Dclose}; }
inline H5Handle h5_dataspace(hid_t id) { return {id, H5Sclose}; }
inline H5Handle h5_group(hid_t id) { return {id, H5Gclose}; }
inline H5Handle h5_plist(hid_t id) { return {id, H5Pclose}; }
inline H5Handle h5_type(hid_t id) { return {id, H5Tclose}; }
inline H5Handle h5_attribute(hid_t id) { return {id, H5Aclose}; }

// The innermost message on HDF5's error stack (it names the cause, e.g. "truncated file: eof =
// ..."), as one line, and clears the stack. HDF5's system-call messages carry its internals
// ("unable to open file: name = 'x', errno = 30, error message = 'Read-only file system',
// flags = 13, o_flags = 242"): only the operating system's text is kept of those.
inline std::string h5_error_message() {
  std::string message;
  auto walker = [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    // UPWARD visits the most specific entry (where the error was detected) first.
    if (out->empty() && err && err->desc && *err->desc) *out = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walker, &message);
  H5Eclear2(H5E_DEFAULT);
  const std::string marker = "error message = '";
  if (const auto at = message.find(marker); at != std::string::npos) {
    const auto begin = at + marker.size();
    const auto end = message.find('\'', begin);
    message = message.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  }
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message.empty() ? "unknown HDF5 error" : message;
}

// Silences HDF5's automatic error printing for the lifetime of the guard (antdt reports
// errors itself, in one line), restoring the previous handler afterwards.
class H5QuietErrors {
 public:
  H5QuietErrors() noexcept {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  H5QuietErrors(const H5QuietErrors&) = delete;
  H5QuietErrors& operator=(const H5QuietErrors&) = delete;
  ~H5QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace antdt::detail
