#include "rsfc/core/window.h"

#include <algorithm>

#include "rsfc/core/types.h"

namespace rsfc {

ClampResult clamp_window(const ClampRequest& r) {
  ClampResult out{.raw_window = r.raw_window, .limit = ClampLimit::kNone};
  const uint64_t original = window_bytes(r.raw_window, r.scale);
  const uint64_t floor = r.min_window_bytes;
  const uint64_t wanted = std::max(r.target_bytes, floor);
  if (wanted >= original) return out;  // only ever lower

  uint16_t raw = encode_window_round_up(wanted, r.scale);
  ClampLimit limit = r.target_bytes >= floor ? ClampLimit::kTarget : ClampLimit::kFloor;

  // The receiver was already offered everything up to `edge`: keep it reachable.
  if (r.edge_valid && seq_gt(r.edge, r.ack)) {
    const uint64_t needed = static_cast<uint32_t>(r.edge - r.ack);
    if (window_bytes(raw, r.scale) < needed) {
      raw = encode_window_round_up(needed, r.scale);
      limit = ClampLimit::kRightEdge;
    }
  }
  if (raw >= r.raw_window) return out;  // the edge rule ate the whole reduction
  out.raw_window = raw;
  out.limit = limit;
  return out;
}

}  // namespace rsfc
