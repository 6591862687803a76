// The one codec of the step messages: each field type is written and read here, and each
// message's field list (StepReport::fields, StepReply::fields) is walked by both directions.
#include "protocol/step_messages.hpp"

#include <string>
#include <type_traits>

#include "antdt/error.hpp"
#include "dds/wire.hpp"

namespace antdt::protocol {

namespace {

struct Writer {
  detail::ByteWriter& out;
  void operator()(bool v) const { out.put<std::uint8_t>(v ? 1 : 0); }
  void operator()(ReplyStatus v) const { out.put(static_cast<std::uint8_t>(v)); }
  void operator()(const std::string& v) const { out.put_string(v); }
  void operator()(const std::vector<dds::BatchRange>& v) const { dds::encode_ranges(v, out); }
  void operator()(const std::vector<dds::StreamRange>& v) const { dds::encode_ranges(v, out); }
  template <class T>
  requires std::is_arithmetic_v<T>
  void operator()(T v) const { out.put(v); }
};

struct Reader {
  detail::ByteReader& in;
  const char* message;
  void operator()(bool& v) const {
    const auto b = in.get<std::uint8_t>();
    if (b > 1) throw Error(std::string(message) + ": a flag byte is " + std::to_string(b) + ", not 0 or 1");
    v = b == 1;
  }
  void operator()(ReplyStatus& v) const {
    const auto b = in.get<std::uint8_t>();
    if (b > static_cast<std::uint8_t>(ReplyStatus::error))
      throw Error(std::string(message) + ": unknown status " + std::to_string(b));
    v = static_cast<ReplyStatus>(b);
  }
  void operator()(std::string& v) const { v = in.get_string(); }
  void operator()(std::vector<dds::BatchRange>& v) const { v = dds::decode_batch_ranges(in); }
  void operator()(std::vector<dds::StreamRange>& v) const { v = dds::decode_stream_ranges(in); }
  template <class T>
  requires std::is_arithmetic_v<T>
  void operator()(T& v) const { v = in.get<T>(); }
};

struct Sizer {
  std::size_t& bytes;
  void operator()(bool) const { bytes += 1; }
  void operator()(ReplyStatus) const { bytes += 1; }
  void operator()(const std::string& v) const { bytes += sizeof(std::uint64_t) + v.size(); }
  template <class Range>
  void operator()(const std::vector<Range>& v) const {
    bytes += sizeof(std::uint64_t) + v.size() * dds::kRangeWireBytes;
  }
  template <class T>
  requires std::is_arithmetic_v<T>
  void operator()(T) const { bytes += sizeof(T); }
};

template <class Message>
void encode_message(const Message& m, detail::ByteWriter& out) {
  out.put(Message::kVersion);
  Message::fields(m, Writer{out});
}

template <class Message>
Message decode_message(detail::ByteReader& in, const char* name) {
  const auto version = in.get<std::uint8_t>();
  if (version != Message::kVersion) {
    throw Error(std::string(name) + " of protocol version " + std::to_string(version) + "; this build speaks version " +
                std::to_string(Message::kVersion) + " (every rank must run the same antdt)");
  }
  Message m;
  Message::fields(m, Reader{in, name});
  return m;
}

template <class Message>
std::size_t size_of(const Message& m) {
  std::size_t bytes = sizeof(std::uint8_t);
  Message::fields(m, Sizer{bytes});
  return bytes;
}

}  // namespace

void encode(const StepReport& message, detail::ByteWriter& out) { encode_message(message, out); }
void encode(const StepReply& message, detail::ByteWriter& out) { encode_message(message, out); }
void encode(const ResumeState& message, detail::ByteWriter& out) { encode_message(message, out); }
StepReport decode_report(detail::ByteReader& in) { return decode_message<StepReport>(in, "step report"); }
StepReply decode_reply(detail::ByteReader& in) { return decode_message<StepReply>(in, "step reply"); }
ResumeState decode_resume(detail::ByteReader& in) { return decode_message<ResumeState>(in, "resume state"); }
std::size_t encoded_size(const StepReport& message) { return size_of(message); }
std::size_t encoded_size(const StepReply& message) { return size_of(message); }

}  // namespace antdt::protocol
