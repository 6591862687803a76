// Private: the DDS ranges on the wire (step replies: the part of a step left undone; resume
// state: the carried ranges). Field by field, so struct padding never travels.
#pragma once

#include <vector>

#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

// Bytes per range on the wire.
inline constexpr std::size_t kRangeWireBytes = 2 * sizeof(std::int64_t);

void encode_ranges(const std::vector<BatchRange>& ranges, antdt::detail::ByteWriter& out);
void encode_ranges(const std::vector<StreamRange>& ranges, antdt::detail::ByteWriter& out);
// Throw antdt::Error on a short buffer or a range with begin < 0 or begin > end.
std::vector<BatchRange> decode_batch_ranges(antdt::detail::ByteReader& in);
std::vector<StreamRange> decode_stream_ranges(antdt::detail::ByteReader& in);

}  // namespace antdt::dds
