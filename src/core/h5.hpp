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
  void reset() noexcept {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
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
