#!/usr/bin/env python3
"""Cut a kernel's BTF out of its image, for `slowpath --bpf.btf-path`.

    scripts/extract-btf.py IMAGE OUT

IMAGE is a kernel as distributions ship it: /boot/vmlinuz-* (an x86 bzImage
whose payload is gzip, xz, zstd or lz4 compressed; an arm64 Image, plain or
gzip), or an uncompressed vmlinux. OUT gets the raw BTF blob (the `.BTF`
section, what /sys/kernel/btf/vmlinux serves on a kernel that exposes it);
libbpf and bpftool read it as is. The kernel must have been built with
CONFIG_DEBUG_INFO_BTF=y; for one built without, the BTF has to come from its
DWARF debug info instead (`pahole --btf_encode_detached=OUT vmlinux` on the
debug package's vmlinux) or from BTFHub.

Decompression uses the gzip, xz, zstd and lz4 command-line tools, as the
kernel's own scripts/extract-vmlinux does. Exit status 1 when no BTF is
found, 2 for bad usage.
"""

import struct
import subprocess
import sys

# BTF header: magic 0xeb9f, version 1, flags 0, hdr_len 24 (include/uapi/linux/btf.h)
BTF_MAGIC = b"\x9f\xeb\x01\x00\x18\x00\x00\x00"
# Magic bytes of each compressed payload a kernel image may carry, and the
# command that decompresses it from stdin (trailing data after the payload
# makes some of them complain; what they wrote before is what counts).
PAYLOADS = [
    (b"\x1f\x8b\x08", ["gzip", "-dc"]),
    (b"\xfd7zXZ\x00", ["xz", "-dc"]),
    (b"\x28\xb5\x2f\xfd", ["zstd", "-dc"]),
    (b"\x02\x21\x4c\x18", ["lz4", "-dc"]),  # lz4 legacy frame (the kernel's)
]


def btf_blob(data):
    """The BTF blob in `data` (header, types, strings), or None."""
    at = data.find(BTF_MAGIC)
    while at >= 0:
        hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<5I", data, at + 4)
        end = at + hdr_len + max(type_off + type_len, str_off + str_len)
        if type_len > 0 and str_len > 0 and end <= len(data):
            return data[at:end]
        at = data.find(BTF_MAGIC, at + 1)
    return None


def decompressed(data):
    """Each payload of `data` that decompresses, in the order found."""
    for magic, command in PAYLOADS:
        at = data.find(magic)
        tries = 0
        while at >= 0 and tries < 4:
            try:
                out = subprocess.run(command, input=data[at:], capture_output=True, timeout=120).stdout
            except FileNotFoundError:
                print(f"extract-btf: {command[0]} is not installed; skipping {command[0]} payloads",
                      file=sys.stderr)
                break
            if out:
                yield out
            at = data.find(magic, at + 1)
            tries += 1


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    image, out = sys.argv[1], sys.argv[2]
    with open(image, "rb") as f:
        data = f.read()
    blob = btf_blob(data)
    if blob is None:
        blob = next((b for b in map(btf_blob, decompressed(data)) if b), None)
    if blob is None:
        sys.exit(f"extract-btf: no BTF in {image}: was the kernel built with CONFIG_DEBUG_INFO_BTF=y? "
                 "If not, generate it from the debug vmlinux with pahole --btf_encode_detached")
    with open(out, "wb") as f:
        f.write(blob)
    print(f"extract-btf: wrote {len(blob)} bytes of BTF to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
