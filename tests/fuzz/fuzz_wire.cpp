// Fuzz target wire: the control-message decoders. Byte 0 picks the decoder (the DDS ranges
// of a reply, then a StepStream carrying them as a step's undone part; decode_plan; the step protocol's StepReport,
// StepReply, then an Agent applying it, and ResumeState); the rest is the message. A message that decodes must encode
// back to the bytes the decoder consumed.
#include <vector>

#include "agent/agent.hpp"
#include "core/bytes.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
#include "dds/dds.hpp"
#include "dds/wire.hpp"
#include "fuzz_target.hpp"
#include "protocol/step_messages.hpp"

namespace antdt::fuzz {

namespace {

void require_prefix(const std::vector<std::byte>& encoded, std::span<const std::byte> message, const char* what) {
  require(encoded.size() <= message.size() && std::equal(encoded.begin(), encoded.end(), message.begin()), what);
}

}  // namespace

void run(std::span<const std::byte> input) {
  if (input.empty()) return;
  const auto message = input.subspan(1);
  detail::ByteReader in(message);
  detail::ByteWriter out;
  dds::LedgerOptions options;
  options.dataset_size = 1000;
  options.shard_size = 10;
  switch (byte_at(input, 0) % 5) {
    case 0: {
      const auto undone = dds::decode_batch_ranges(in);
      dds::encode_ranges(undone, out);
      require_prefix(out.bytes(), message, "encode_ranges(decode_batch_ranges(x)) is not a prefix of x");
      // What a rank does with a reply: carry the step's undone part, then take the next batch's
      // indices. A bad list may be refused, with an antdt::Error.
      dds::StepStream stream(options.dataset_size, 2);
      const dds::StepBatch batch = stream.next(16);
      stream.advance(batch, undone);
      const dds::StepBatch next = stream.next(16);
      (void)dds::ShardMap(options).indices(next, 0, next.size());
      break;
    }
    case 1: {
      const Plan plan = decode_plan(in);
      encode_plan(plan, out);
      require_prefix(out.bytes(), message, "encode_plan(decode_plan(x)) is not a prefix of x");
      break;
    }
    case 2: {
      protocol::encode(protocol::decode_report(in), out);
      require_prefix(out.bytes(), message, "encode(decode_report(x)) is not a prefix of x");
      break;
    }
    case 3: {
      const protocol::StepReply reply = protocol::decode_reply(in);
      protocol::encode(reply, out);
      require_prefix(out.bytes(), message, "encode(decode_reply(x)) is not a prefix of x");
      require(protocol::encoded_size(reply) == out.bytes().size(), "encoded_size(reply) is not its encoded size");
      // What a rank does with it: its Agent applies it (rank 0 of 2, a plan of 8 samples
      // each), then starts a step. A bad reply may be refused, with an antdt::Error.
      agent::VirtualClock clock;
      agent::Agent a(0, 2, options, EmulationOptions{}, clock);
      a.reset_plan(std::make_shared<const Plan>(equal_plan(16, {8, 8})));
      (void)a.apply(reply, reply.plan_follows ? std::make_shared<const Plan>(equal_plan(16, {8, 8}, 1)) : nullptr);
      if (!a.finished()) (void)a.begin();
      break;
    }
    default: {
      protocol::encode(protocol::decode_resume(in), out);
      require_prefix(out.bytes(), message, "encode(decode_resume(x)) is not a prefix of x");
      break;
    }
  }
}

}  // namespace antdt::fuzz
