// Private: how the core saves its state into a checkpoint without knowing the checkpoint store.
//
// A saved structure lists its entries once, by name and member, in a static `fields`
// function; save_fields and load_fields both walk that list, so the two directions cannot
// drift. The core writes through StateWriter and reads through StateReader: the library's
// checkpoint store (HDF5, src/checkpoint/) implements them in a job, MemoryState in the
// simulator and the tests. Nothing here knows MPI or HDF5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace antdt::detail {

class StateWriter {
 public:
  virtual ~StateWriter() = default;
  virtual void put_bytes(const std::string& name, std::span<const std::byte> bytes) = 0;
  virtual void put_int64(const std::string& name, std::int64_t value) = 0;
  virtual void put_uint64s(const std::string& name, std::span<const std::uint64_t> values) = 0;
  virtual void put_string(const std::string& name, const std::string& value) = 0;
};

// Every read throws antdt::CheckpointError (naming where() and the entry) when the entry is
// missing or of another type; uint64s also when it does not hold exactly `count` values.
class StateReader {
 public:
  virtual ~StateReader() = default;
  [[nodiscard]] virtual std::vector<std::byte> bytes(const std::string& name) const = 0;
  [[nodiscard]] virtual std::int64_t int64(const std::string& name) const = 0;
  [[nodiscard]] virtual std::vector<std::uint64_t> uint64s(const std::string& name, std::int64_t count) const = 0;
  [[nodiscard]] virtual std::string string(const std::string& name) const = 0;
  // The checkpoint's name for messages ("checkpoint /runs/a/ckpt-00000020.h5").
  [[nodiscard]] virtual std::string where() const = 0;
};

// In memory, for the simulator's restarts and the tests.
class MemoryState final : public StateWriter, public StateReader {
 public:
  void put_bytes(const std::string& name, std::span<const std::byte> bytes) override;
  void put_int64(const std::string& name, std::int64_t value) override;
  void put_uint64s(const std::string& name, std::span<const std::uint64_t> values) override;
  void put_string(const std::string& name, const std::string& value) override;
  [[nodiscard]] std::vector<std::byte> bytes(const std::string& name) const override;
  [[nodiscard]] std::int64_t int64(const std::string& name) const override;
  [[nodiscard]] std::vector<std::uint64_t> uint64s(const std::string& name, std::int64_t count) const override;
  [[nodiscard]] std::string string(const std::string& name) const override;
  [[nodiscard]] std::string where() const override { return "saved state in memory"; }

 private:
  using Entry = std::variant<std::vector<std::byte>, std::int64_t, std::vector<std::uint64_t>, std::string>;
  template <class T>
  const T& get(const std::string& name, const char* type) const;
  void put(const std::string& name, Entry entry);
  std::map<std::string, Entry> entries_;
};

// Writes every field of `value` (T::fields(value, f) calls f(name, member) once per entry).
template <class T>
void save_fields(StateWriter& out, const T& value) {
  T::fields(value, [&](const char* name, const auto& member) {
    using M = std::remove_cvref_t<decltype(member)>;
    if constexpr (std::is_same_v<M, std::vector<std::byte>>) {
      out.put_bytes(name, member);
    } else if constexpr (std::is_same_v<M, std::int64_t>) {
      out.put_int64(name, member);
    } else if constexpr (std::is_same_v<M, std::vector<std::uint64_t>>) {
      out.put_uint64s(name, member);
    } else {
      static_assert(std::is_same_v<M, std::string>, "a saved field is bytes, int64, uint64s or a string");
      out.put_string(name, member);
    }
  });
}

// Reads every field of `value` back. A uint64s member must already have the size its entry
// must have (the read checks it).
template <class T>
void load_fields(const StateReader& in, T& value) {
  T::fields(value, [&](const char* name, auto& member) {
    using M = std::remove_cvref_t<decltype(member)>;
    if constexpr (std::is_same_v<M, std::vector<std::byte>>) {
      member = in.bytes(name);
    } else if constexpr (std::is_same_v<M, std::int64_t>) {
      member = in.int64(name);
    } else if constexpr (std::is_same_v<M, std::vector<std::uint64_t>>) {
      member = in.uint64s(name, static_cast<std::int64_t>(member.size()));
    } else {
      static_assert(std::is_same_v<M, std::string>, "a saved field is bytes, int64, uint64s or a string");
      member = in.string(name);
    }
  });
}

}  // namespace antdt::detail
