#include "core/saved_state.hpp"

#include "antdt/error.hpp"

namespace antdt::detail {

void MemoryState::put(const std::string& name, Entry entry) {
  if (!entries_.emplace(name, std::move(entry)).second) throw UsageError("saved state: '" + name + "' put twice");
}

void MemoryState::put_bytes(const std::string& name, std::span<const std::byte> bytes) {
  put(name, std::vector<std::byte>(bytes.begin(), bytes.end()));
}
void MemoryState::put_int64(const std::string& name, std::int64_t value) { put(name, value); }
void MemoryState::put_uint64s(const std::string& name, std::span<const std::uint64_t> values) {
  put(name, std::vector<std::uint64_t>(values.begin(), values.end()));
}
void MemoryState::put_string(const std::string& name, const std::string& value) { put(name, value); }

template <class T>
const T& MemoryState::get(const std::string& name, const char* type) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw CheckpointError(where() + ": no entry '" + name + "'");
  const T* v = std::get_if<T>(&it->second);
  if (v == nullptr) throw CheckpointError(where() + ": entry '" + name + "' is not " + type);
  return *v;
}

std::vector<std::byte> MemoryState::bytes(const std::string& name) const {
  return get<std::vector<std::byte>>(name, "bytes");
}
std::int64_t MemoryState::int64(const std::string& name) const { return get<std::int64_t>(name, "an int64"); }
std::vector<std::uint64_t> MemoryState::uint64s(const std::string& name, std::int64_t count) const {
  const auto& v = get<std::vector<std::uint64_t>>(name, "uint64 values");
  if (count >= 0 && static_cast<std::int64_t>(v.size()) != count) {
    throw CheckpointError(where() + ": entry '" + name + "' holds " + std::to_string(v.size()) + " values, not " +
                          std::to_string(count));
  }
  return v;
}
std::string MemoryState::string(const std::string& name) const { return get<std::string>(name, "a string"); }

}  // namespace antdt::detail
