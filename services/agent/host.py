"""Facts about the machine the agent runs on: its name, its addresses, its processor."""

from __future__ import annotations

import fcntl
import ipaddress
import platform
import socket
import struct
from pathlib import Path

_SIOCGIFADDR = 0x8915


def hostname() -> str:
    return socket.gethostname()


def _interface_ipv4(sock: socket.socket, name: str) -> str | None:
    try:
        packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
    except OSError:
        return None  # no IPv4 address on this interface
    return socket.inet_ntoa(packed[20:24])


def ipv4_addresses() -> list[str]:
    """The host's non-loopback IPv4 addresses (may be empty)."""
    found: list[str] = []
    try:
        interfaces = [name for _, name in socket.if_nameindex()]
    except OSError:
        interfaces = []
    if interfaces:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for name in interfaces:
                address = _interface_ipv4(sock, name)
                if address:
                    found.append(address)
    if not found:
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        except OSError:
            infos = []
        found = [str(info[4][0]) for info in infos]
    unique: list[str] = []
    for address in found:
        if not ipaddress.ip_address(address).is_loopback and address not in unique:
            unique.append(address)
    return unique


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name, as /proc/cpuinfo gives it (first processor)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Processor", "cpu model", "Hardware", "cpu"):
        for line in text.splitlines():
            label, sep, value = line.partition(":")
            if sep and label.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "CPU"
