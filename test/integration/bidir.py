#!/usr/bin/python3
"""Bulk transfer in BOTH directions on ONE TCP connection (so every data segment also
carries the ACKs of the other direction). Prints JSON {"sent": N, "received": M}.

    bidir.py server PORT SECONDS      (listens on ::, serves one connection)
    bidir.py client HOST PORT SECONDS
"""
import json
import socket
import sys
import threading
import time

CHUNK = b"\x55" * 65536


def run(sock, seconds):
    stats = {"sent": 0, "received": 0}

    def rx():
        while True:
            b = sock.recv(1 << 20)
            if not b:
                return
            stats["received"] += len(b)

    t = threading.Thread(target=rx)
    t.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stats["sent"] += sock.send(CHUNK)
    sock.shutdown(socket.SHUT_WR)
    t.join(timeout=seconds + 10)
    sock.close()
    print(json.dumps(stats), flush=True)


def main():
    if sys.argv[1] == "server":
        port, seconds = int(sys.argv[2]), float(sys.argv[3])
        ls = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        ls.bind(("::", port))
        ls.listen(1)
        print("listening", flush=True)
        s, _ = ls.accept()
        ls.close()
        run(s, seconds)
    else:
        host, port, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        s = socket.create_connection((host, port), timeout=10)
        s.settimeout(None)
        run(s, seconds)


if __name__ == "__main__":
    main()
