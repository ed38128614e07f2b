#!/usr/bin/env python3
"""Cross-check sprayswitch's RoCEv2 wire layer against an independent implementation: Scapy's
RoCEv2 layer (scapy.contrib.roce), which builds BTH/AETH/CNP and computes the ICRC itself.

  scapy_roce.py gen OUT.pcap     build frames with Scapy; print one JSON object per frame with
                                 the fields Scapy put in (sprayswitch must parse them the same)
  scapy_roce.py check IN.pcap    read frames (built by sprayswitch); print one JSON object per
                                 frame with the fields Scapy parsed and whether Scapy computes
                                 the same ICRC as the one in the frame

Extension headers Scapy has no layer for (RETH, DETH, ImmDt, AtomicETH) are carried as raw bytes
after the BTH; Scapy's ICRC covers them like any payload.
"""
import json
import struct
import sys

from scapy.all import Ether, Dot1Q, IP, IPv6, UDP, Raw, rdpcap, wrpcap, raw
from scapy.contrib.roce import BTH, AETH, cnp


def reth(va, rkey, length):
    return struct.pack("!QII", va, rkey, length)


def cases():
    """(description, l3 builder, BTH kwargs, extension bytes, payload, expected extras)"""
    pay = bytes(range(256)) * 4
    yield ("rc_send_only", dict(opcode=0x04, dqpn=0x11, psn=100, ackreq=1), b"", pay[:300], {})
    yield ("rc_send_first_wrap", dict(opcode=0x00, dqpn=0xABCDEF, psn=0xFFFFFF), b"", pay[:1024], {})
    yield ("rc_write_first", dict(opcode=0x06, dqpn=0x12, psn=5), reth(0x7F0012345000, 0x1234, 3000), pay[:1024], {"dma_len": 3000})
    yield ("rc_write_middle_pad", dict(opcode=0x07, dqpn=0x12, psn=6, padcount=1), b"", pay[:1023] + b"\x00", {})
    yield ("rc_write_only_imm", dict(opcode=0x0B, dqpn=0x12, psn=7), reth(0x1000, 7, 16) + struct.pack("!I", 0xCAFE), pay[:16], {"dma_len": 16})
    yield ("rc_read_request", dict(opcode=0x0C, dqpn=0x13, psn=0xFFFFFE, ackreq=1), reth(0x2000, 9, 65536), b"", {"dma_len": 65536})
    yield ("rc_read_response_middle", dict(opcode=0x0E, dqpn=0x13, psn=1), b"", pay[:1024], {})
    yield ("rc_ack", dict(opcode=0x11, dqpn=0x11, psn=3140457), None, b"", {"aeth": (0x1F, 1)})
    yield ("rc_nak_seq", dict(opcode=0x11, dqpn=0x11, psn=2411534), None, b"", {"aeth": (0x60, 0)})
    yield ("rc_fetch_add", dict(opcode=0x14, dqpn=0x14, psn=9), struct.pack("!QIQQ", 0x3000, 5, 1, 0), b"", {})
    yield ("uc_send_last_imm", dict(opcode=0x23, dqpn=0x20, psn=77), struct.pack("!I", 42), pay[:64], {})
    yield ("ud_send_only", dict(opcode=0x64, dqpn=0x30, psn=11), struct.pack("!II", 0x80010000, 0x12), pay[:512], {})
    yield ("ecn_ce_marked", dict(opcode=0x0A, dqpn=0x12, psn=8, fecn=1), reth(0, 1, 8), pay[:8], {"tos": 0x03, "dma_len": 8})


def l3s():
    yield ("v4", lambda tos: IP(src="10.99.0.2", dst="10.99.0.1", ttl=64, tos=tos, flags="DF", id=0x1348))
    yield ("v6", lambda tos: IPv6(src="fd99::2", dst="fd99::1", hlim=64, tc=tos, fl=0x12345))


def gen(out):
    frames, meta = [], []
    for l3name, l3 in l3s():
        for vlan in (None, 100):
            for name, bth_kw, ext, payload, extra in cases():
                eth = Ether(src="52:54:00:99:00:02", dst="52:54:00:99:00:01")
                if vlan is not None:
                    eth = eth / Dot1Q(vlan=vlan, prio=3)
                pkt = eth / l3(extra.get("tos", 0)) / UDP(sport=49441, dport=4791, chksum=0)
                bth = BTH(**bth_kw)
                if "aeth" in extra:
                    syn, msn = extra["aeth"]
                    pkt = pkt / bth / AETH(syndrome=syn, msn=msn)
                else:
                    pkt = pkt / bth / Raw(ext + payload)
                frames.append(pkt)
                pad = bth_kw.get("padcount", 0)
                meta.append({
                    "name": f"{name}_{l3name}" + ("_vlan" if vlan else ""),
                    "opcode": bth_kw["opcode"], "dest_qp": bth_kw["dqpn"], "psn": bth_kw["psn"],
                    "ack_req": bool(bth_kw.get("ackreq", 0)), "fecn": bool(bth_kw.get("fecn", 0)),
                    "payload_len": len(payload) - pad, "vlan": vlan,
                    "dma_len": extra.get("dma_len"),
                    "aeth_raw": extra["aeth"][0] if "aeth" in extra else None,
                    "msn": extra["aeth"][1] if "aeth" in extra else None,
                    "src": "10.99.0.2" if l3name == "v4" else "fd99::2",
                })
    # A CNP, built by Scapy's own helper.
    for l3name, l3 in l3s():
        frames.append(Ether(src="52:54:00:99:00:02", dst="52:54:00:99:00:01") / l3(0)
                      / UDP(sport=49441, dport=4791, chksum=0) / cnp(0x11))
        meta.append({"name": f"cnp_{l3name}", "opcode": 0x81, "dest_qp": 0x11, "psn": 0,
                     "ack_req": False, "fecn": False, "payload_len": 0, "vlan": None,
                     "dma_len": None, "aeth_raw": None, "msn": None,
                     "src": "10.99.0.2" if l3name == "v4" else "fd99::2"})
    wrpcap(out, frames)
    for m in meta:
        print(json.dumps(m))


def check(path):
    for n, pkt in enumerate(rdpcap(path), start=1):
        if BTH not in pkt:
            print(json.dumps({"frame": n, "roce": False}))
            continue
        original = raw(pkt)
        rebuilt = pkt.copy()
        rebuilt[BTH].icrc = None
        recomputed = raw(rebuilt)
        bth = pkt[BTH]
        print(json.dumps({
            "frame": n, "roce": True, "opcode": bth.opcode, "dest_qp": bth.dqpn, "psn": bth.psn,
            "icrc_ok": recomputed[-4:] == original[-4:] and len(recomputed) == len(original),
        }))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check"):
        sys.exit(__doc__)
    (gen if sys.argv[1] == "gen" else check)(sys.argv[2])
