#include "dds/wire.hpp"

#include <string>

namespace antdt::dds {

namespace {

template <class Range>
void encode(const std::vector<Range>& ranges, antdt::detail::ByteWriter& out) {
  out.put<std::uint64_t>(ranges.size());
  for (const auto& r : ranges) {
    out.put(r.begin);
    out.put(r.end);
  }
}

template <class Range>
std::vector<Range> decode(antdt::detail::ByteReader& in, const char* what) {
  const auto count = in.get<std::uint64_t>();
  if (count > in.remaining() / kRangeWireBytes) {
    throw Error(std::string("dds: a list of ") + what + " claims " + std::to_string(count) + " ranges but only " +
                std::to_string(in.remaining()) + " bytes follow");
  }
  std::vector<Range> ranges(static_cast<std::size_t>(count));
  for (auto& r : ranges) {
    r.begin = in.get<std::int64_t>();
    r.end = in.get<std::int64_t>();
    if (r.begin < 0 || r.begin > r.end) {
      throw Error(std::string("dds: malformed ") + what + " range [" + std::to_string(r.begin) + ", " +
                  std::to_string(r.end) + "): begin must be >= 0 and <= end");
    }
  }
  return ranges;
}

}  // namespace

void encode_ranges(const std::vector<BatchRange>& ranges, antdt::detail::ByteWriter& out) { encode(ranges, out); }
void encode_ranges(const std::vector<StreamRange>& ranges, antdt::detail::ByteWriter& out) { encode(ranges, out); }
std::vector<BatchRange> decode_batch_ranges(antdt::detail::ByteReader& in) {
  return decode<BatchRange>(in, "batch offset");
}
std::vector<StreamRange> decode_stream_ranges(antdt::detail::ByteReader& in) {
  return decode<StreamRange>(in, "stream position");
}

}  // namespace antdt::dds
