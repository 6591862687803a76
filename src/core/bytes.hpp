// Private: flat little-endian-as-host byte encoding for control messages and checkpoint
// blobs. All ranks of a job run the same binary on the same architecture, so values are
// copied as they are; the reader checks bounds and throws on a short buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "antdt/error.hpp"

namespace antdt::detail {

class ByteWriter {
 public:
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put_vector(const std::vector<T>& values) {
    put<std::uint64_t>(values.size());
    const auto* p = reinterpret_cast<const std::byte*>(values.data());
    bytes_.insert(bytes_.end(), p, p + values.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
  }
  [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::vector<std::byte> take() noexcept { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}
  template <class T>
  requires std::is_trivially_copyable_v<T> T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > (bytes_.size() - pos_) / (sizeof(T) ? sizeof(T) : 1))
      throw Error("control message: vector length out of range");
    std::vector<T> values(n);
    if (n > 0) std::memcpy(values.data(), bytes_.data() + pos_, n * sizeof(T));  // data() may be null when empty
    pos_ += n * sizeof(T);
    return values;
  }
  std::string get_string() {
    const auto n = get<std::uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  [[nodiscard]] bool done() const noexcept { return pos_ == bytes_.size(); }
  [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - pos_; }

 private:
  void need(std::size_t n) const {
    if (n > bytes_.size() - pos_) throw Error("control message truncated: need " + std::to_string(n) + " more bytes");
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace antdt::detail
