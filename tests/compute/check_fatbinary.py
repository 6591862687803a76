#!/usr/bin/env python3
"""The CUDA kernels are one fat binary for several GPU generations.

    check_fatbinary.py LIBRARY 75-real,80-real,86-real,89-real,90   (";" also separates)

Reads the .nv_fatbin section of LIBRARY (an ELF shared library) and checks that, for every
entry of the CMake CUDA architecture list, it holds an sm_XX ELF image (cubin) containing
every antdt kernel, and, for an entry without "-real", also PTX for compute_XX (so newer GPUs
can JIT it). Needs neither a GPU nor cuobjdump. The fatbin container layout is NVIDIA's
(undocumented but stable since CUDA 11): a 16-byte header {magic 0xBA55ED50, u16 version,
u16 header size, u64 size}, then entries {u16 kind (1 PTX, 2 ELF), u16 flags, u32 header
size, u64 payload size, ..., u32 arch at offset 28}.
"""
import struct
import sys

KERNELS = [b"bias_activation_kernel", b"softmax_cross_entropy_kernel", b"relu_mask_kernel",
           b"add_sample_count_kernel", b"fill_kernel", b"sgd_kernel", b"adam_kernel", b"flag_non_finite_kernel",
           b"prepare_update_kernel"]


def section(path, name):
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = headers[shstrndx][4]
    for sh_name, _type, _flags, _addr, off, size in headers:
        end = data.index(b"\0", strtab_off + sh_name)
        if data[strtab_off + sh_name:end] == name:
            return data[off:off + size]
    sys.exit(f"{path}: no {name.decode()} section: the library has no CUDA device code")


def entries(fatbin):
    pos = 0
    while pos + 16 <= len(fatbin):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != 0xBA55ED50:  # containers are 8-byte aligned; skip padding
            pos += 8
            continue
        q, end = pos + header_size, pos + header_size + size
        while q < end:
            kind, _flags, entry_header, payload_size = struct.unpack_from("<HHIQ", fatbin, q)
            arch, = struct.unpack_from("<I", fatbin, q + 28)
            yield kind, arch, fatbin[q + entry_header:q + entry_header + payload_size]
            q += entry_header + payload_size
        pos = end


def main():
    lib, archs = sys.argv[1], [a for a in sys.argv[2].replace(",", ";").split(";") if a]
    found = list(entries(section(lib, b".nv_fatbin")))
    elf = {arch: payload for kind, arch, payload in found if kind == 2}
    ptx = {arch for kind, arch, _ in found if kind == 1}
    print("ELF (cubin) images: " + ", ".join(f"sm_{a}" for a in sorted(elf)))
    print("PTX: " + ", ".join(f"compute_{a}" for a in sorted(ptx)))
    failures = []
    for entry in archs:
        number = int(entry.split("-")[0])
        if number not in elf:
            failures.append(f"no sm_{number} image for architecture entry {entry}")
        else:
            missing = [k.decode() for k in KERNELS if k not in elf[number]]
            if missing:
                failures.append(f"sm_{number} image lacks kernels {missing}")
        if not entry.endswith("-real") and number not in ptx:
            failures.append(f"no compute_{number} PTX for architecture entry {entry} (needed to JIT on newer GPUs)")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print(f"OK: {len(archs)} architecture entries, each with all {len(KERNELS)} kernels")


if __name__ == "__main__":
    main()
