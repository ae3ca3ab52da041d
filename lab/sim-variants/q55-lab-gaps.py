#!/usr/bin/python3
"""Q55 (lab/EXPERIMENTS.md): the gaps between a phone's packets as the gateway sees them, in
units of one packet's time at the uplink's rate (its IP length + 14 bytes of Ethernet), from
a lab capture (experiments.py --capture). Busy uplinks show ratios near 1; an idle one longer
gaps. Prints, per source address, the ratios' 10/50/90th percentiles, the coefficient of
variation of those under 3, and a histogram in quarters (5 = 5 or more).

    /usr/bin/python3 lab/sim-variants/q55-lab-gaps.py WORKDIR/suite/TEST/capture.pcap UP_BPS
"""
import collections
import statistics as st
import sys

from scapy.all import IP, TCP, PcapReader


def main() -> None:
    path, up_bps = sys.argv[1], float(sys.argv[2])
    by_src = collections.defaultdict(list)
    for p in PcapReader(path):
        if IP in p and TCP in p:
            by_src[p[IP].src].append((float(p.time), p[IP].len))
    for src, arr in sorted(by_src.items()):
        arr.sort()
        ratios = [(t1 - t0) / ((l1 + 14) * 8 / up_bps) for (t0, _), (t1, l1) in zip(arr, arr[1:])]
        if not ratios:
            continue
        q = sorted(ratios)
        busy = [r for r in ratios if r < 3]
        cv = st.pstdev(busy) / st.mean(busy) if len(busy) > 1 else float("nan")
        print(f"{src}: {len(arr)} packets; gap / packet time p10 {q[len(q) // 10]:.2f} "
              f"p50 {q[len(q) // 2]:.2f} p90 {q[len(q) * 9 // 10]:.2f}; under 3: {len(busy)}, "
              f"cv {cv:.2f}")
        hist = collections.Counter(min(int(r * 4) / 4, 5) for r in ratios)
        print("  " + " ".join(f"{k:g}:{v}" for k, v in sorted(hist.items())))


if __name__ == "__main__":
    main()
