#!/usr/bin/env python3
"""Does a sealed capture hold any of what a clear one shows? (seal_capture.sh)

    python3 tools/peers/seal_capture.py CLEAR.pcap SEALED.pcap

Reads both pcap files (Ethernet, IPv4, TCP), takes the payload of every
segment of the clear capture of 1,000 bytes or more, and a 48-byte window
of it every 1,021 bytes (prime: the data repeats); counts those found anywhere in each capture's
bytes. Exits 1 unless every window is in the clear capture and none is in
the sealed one.
"""
import struct, sys


def payloads(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    at = 24
    while at + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(endian + "IIII", data[at:at + 16])
        frame = data[at + 16:at + 16 + caplen]
        at += 16 + caplen
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6:
            continue
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        yield tcp[(tcp[12] >> 4) * 4:]


def main():
    clear_path, sealed_path = sys.argv[1], sys.argv[2]
    clear_bytes = open(clear_path, "rb").read()
    sealed_bytes = open(sealed_path, "rb").read()
    windows = []
    carried = 0
    for p in payloads(clear_path):
        carried += len(p)
        if len(p) >= 1000:
            windows += [p[i:i + 48] for i in range(0, len(p) - 48, 1021)]
    sealed_carried = sum(len(p) for p in payloads(sealed_path))
    windows = list(set(windows))
    in_clear = sum(w in clear_bytes for w in windows)
    in_sealed = sum(w in sealed_bytes for w in windows)
    print(f"clear capture: {carried} bytes of TCP payload; sealed: {sealed_carried}")
    print(f"48-byte windows of the clear payload: {len(windows)}; in the clear capture "
          f"{in_clear}, in the sealed capture {in_sealed}")
    ok = windows and in_clear == len(windows) and in_sealed == 0 and sealed_carried > (16 << 20)
    print("none of the clear bytes is on the sealed wire" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
