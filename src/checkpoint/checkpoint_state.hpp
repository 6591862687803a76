// Private: the checkpoint store as the core's StateWriter and StateReader
// (core/saved_state.hpp), so that the core saves into the same HDF5 checkpoint as everything
// else without knowing HDF5.
#pragma once

#include <string>

#include "checkpoint/checkpoint.hpp"
#include "core/saved_state.hpp"

namespace antdt::detail {

class CheckpointStateWriter final : public StateWriter {
 public:
  explicit CheckpointStateWriter(CheckpointWriter& writer) : writer_(&writer) {}
  void put_bytes(const std::string& name, std::span<const std::byte> bytes) override {
    writer_->put_bytes(name, bytes);
  }
  void put_int64(const std::string& name, std::int64_t value) override { writer_->put_int64(name, value); }
  void put_uint64s(const std::string& name, std::span<const std::uint64_t> values) override {
    writer_->put_uint64s(name, values);
  }
  void put_string(const std::string& name, const std::string& value) override { writer_->put_string(name, value); }

 private:
  CheckpointWriter* writer_;
};

class CheckpointStateReader final : public StateReader {
 public:
  explicit CheckpointStateReader(const CheckpointReader& reader) : reader_(&reader) {}
  [[nodiscard]] std::vector<std::byte> bytes(const std::string& name) const override { return reader_->bytes(name); }
  [[nodiscard]] std::int64_t int64(const std::string& name) const override { return reader_->int64(name); }
  [[nodiscard]] std::vector<std::uint64_t> uint64s(const std::string& name, std::int64_t count) const override {
    return reader_->uint64s(name, count);
  }
  [[nodiscard]] std::string string(const std::string& name) const override { return reader_->string(name); }
  [[nodiscard]] std::string where() const override { return "checkpoint " + reader_->path(); }

 private:
  const CheckpointReader* reader_;
};

}  // namespace antdt::detail
