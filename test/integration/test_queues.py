"""Two NFQUEUE queues with --queue-balance (hash of the addresses): both workers get
packets, both regulate their flows, and /metrics counts per queue."""

import math

from helpers import static_cfg
from wire import PH4, PHANTOM_MAC, Conn, check_window

N_SERVERS = 16


def test_two_queues_balance(lab, wire, rsfcd):
    d = rsfcd(static_cfg(uplink=20000), queues=(0, 1))
    want = math.ceil(20000 / 128)
    for i in range(N_SERVERS):
        srv = f"198.19.0.{100 + i}"
        lab.phantom("srv", srv, PHANTOM_MAC)
        c = Conn(wire, srv_addr=srv, phone_addr=PH4, srv_wscale=7)
        c.handshake()
        check_window(c.to_phone(ack_off=1_000_000, window=0xFFFF), want,
                     f"flow to server {srv}")
    m = d.metrics()
    per_queue = {q: m.value("rsfcd_packets_total", queue=str(q)) for q in (0, 1)}
    assert sum(per_queue.values()) == 4 * N_SERVERS, per_queue
    assert all(n > 0 for n in per_queue.values()), f"one worker got nothing: {per_queue}"
    assert m.value("rsfcd_windows_rewritten_total") == N_SERVERS
    assert m.value("rsfcd_flows_created_total") == N_SERVERS
