#!/usr/bin/python3
"""Writes vectors.txt: RoCE v2 packets whose ICRC is computed independently of
gorxe, for wire's tests. IPv4 packets use scapy.contrib.roce's own ICRC; scapy
2.5 has none for IPv6, so IPv6 packets get one computed here with zlib by the
masks of Linux drivers/infiniband/sw/rxe/rxe_icrc.c (flow label and traffic
class, hop limit, UDP checksum, BTH FECN/BECN/Resv6 set to ones).

Run with Debian's python3-scapy: /usr/bin/python3 gen.py > vectors.txt
"""
import struct
import zlib

from scapy.all import IP, IPv6, UDP, Raw, raw
from scapy.contrib.roce import BTH, AETH

def icrc_v6(pkt):
    b = bytearray(raw(pkt)[:-4])  # IPv6 .. pad, without the ICRC
    b[0] |= 0x0F
    b[1] = b[2] = b[3] = 0xFF     # traffic class, flow label
    b[7] = 0xFF                   # hop limit
    b[40 + 6] = b[40 + 7] = 0xFF  # UDP checksum
    b[48 + 4] = 0xFF              # BTH FECN, BECN, Resv6
    crc = zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF
    return struct.pack("<I", crc)

cases = [
    # (name, packet); payload lengths chosen to need pad bytes
    ("v4 RC_SEND_ONLY 5B", IP(src="10.9.0.3", dst="10.9.0.2", id=0, flags="DF", ttl=64)
        / UDP(sport=0xC123, dport=4791, chksum=0)
        / BTH(opcode=0x04, padcount=3, dqpn=0x11, ackreq=1, psn=0xFFFFFF) / Raw(b"hello" + b"\0" * 3)),
    ("v4 RC_ACK", IP(src="10.9.0.2", dst="10.9.0.3", id=0x1234, flags="DF", tos=0x02, ttl=64)
        / UDP(sport=0xC999, dport=4791, chksum=0)
        / BTH(opcode=0x11, dqpn=0x22, psn=7) / AETH(syndrome=0x1F, msn=3)),
    ("v6 RC_SEND_ONLY 5B", IPv6(src="fd00::3", dst="fd00::2", tc=0x02, fl=0xABCDE, hlim=64)
        / UDP(sport=0xC123, dport=4791, chksum=0)
        / BTH(opcode=0x04, padcount=3, dqpn=0x11, ackreq=1, psn=0xFFFFFF) / Raw(b"hello" + b"\0" * 3)),
    ("v6 RC_ACK", IPv6(src="fd00::2", dst="fd00::3", tc=0xB8, fl=0, hlim=255)
        / UDP(sport=0xC999, dport=4791, chksum=0)
        / BTH(opcode=0x11, dqpn=0x22, psn=7) / AETH(syndrome=0x60, msn=0xABCDEF)),
]

for name, pkt in cases:
    if IPv6 in pkt:
        body = raw(pkt)[:-4] + icrc_v6(pkt)
    else:
        body = raw(pkt)  # scapy computes the ICRC
    print(name.replace(" ", "_"), body.hex())
