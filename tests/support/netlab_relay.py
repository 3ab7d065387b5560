"""Test-only delay line for tests/support/netlab.py, where the kernel has no ``tc netem``: run inside the hub namespace as
``python netlab_relay.py IN OUT DELAY LOSS SEED``. Attaches to the TUN devices IN and OUT; every IP packet the
kernel routes into IN is dropped with probability LOSS or written to OUT DELAY seconds later (order kept), where
the kernel receives it and forwards it on."""
from __future__ import annotations

import fcntl
import heapq
import os
import random
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def attach(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main() -> None:
    src_name, dst_name, delay, loss, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    src, dst = attach(src_name), attach(dst_name)
    rng = random.Random(seed)
    queue: list[tuple[float, int, bytes]] = []
    n = 0
    while True:
        now = time.monotonic()
        timeout = max(0.0, queue[0][0] - now) if queue else 1.0
        ready, _, _ = select.select([src, dst], [], [], timeout)
        if src in ready:
            while True:
                try:
                    packet = os.read(src, 65536)
                except BlockingIOError:
                    break
                if rng.random() >= loss:
                    n += 1
                    heapq.heappush(queue, (time.monotonic() + delay, n, packet))
        if dst in ready:  # nothing is routed into OUT; drain what the kernel sends there (e.g. IPv6 chatter)
            try:
                while os.read(dst, 65536):
                    pass
            except BlockingIOError:
                pass
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, packet = heapq.heappop(queue)
            try:
                os.write(dst, packet)
            except OSError:  # e.g. a packet the kernel refuses: lost, as on a real link
                pass


if __name__ == "__main__":
    main()
