#!/usr/bin/env python3
"""The instruction mix of a CUDA kernel's main loop, read from its SASS (no GPU needed).

    tools/sass_loop_mix.py build/CMakeFiles/qlinear.dir/src/backends/cuda/mma_decode_e2m1.cu.o \\
        --kernel 'ILNS0_7MmaCodeE3ELNS0_8MmaScaleE1ELi1ELi2ELi4ELb0EE' [--per N]

For every function whose mangled name contains --kernel, the loop is the backward branch whose body holds the
most tensor-core instructions (HMMA / QMMA / HGMMA); the body's instructions are counted by opcode and by the
pipe that executes them on sm_90 (alu: logic, shifts, prmt, compares, integer adds; fma: IMAD, FFMA, FMUL,
HMUL2 / HFMA2; mma; lsu: loads, stores, ldmatrix, cp.async; other). --per N divides by the work of one iteration
(e.g. the weights per thread) to print instructions per unit. Why: a decode GEMM at small M is bound by how many
instructions each weight costs (4 warp instructions per SM clock issue, the ALU pipe at half that rate), and the
mix shows which pipe a change relieves.
"""
import argparse
import collections
import re
import subprocess
import sys

PIPES = {
    'alu': ('LOP3', 'SHF', 'PRMT', 'ISETP', 'IADD3', 'SEL', 'LEA', 'VIADD', 'IMNMX', 'VIMNMX', 'FSETP', 'PLOP3',
            'FMNMX', 'SGXT', 'BMSK', 'POPC', 'FLO', 'LOP', 'SHL', 'SHR', 'BFE', 'BFI'),
    'fma': ('IMAD', 'FFMA', 'FMUL', 'FADD', 'HMUL2', 'HFMA2', 'HADD2', 'IMUL', 'DFMA', 'DMUL', 'DADD'),
    'mma': ('HMMA', 'QMMA', 'IMMA', 'HGMMA', 'QGMMA', 'IGMMA'),
    'lsu': ('LDS', 'STS', 'LDG', 'STG', 'LDSM', 'LDGSTS', 'LD', 'ST', 'LDC', 'ATOM', 'RED', 'UBLKPF', 'UTMALDG'),
}
LINE = re.compile(r'^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?\s*(.*?);')


def functions(sass):
    name, body = None, []
    for line in sass.splitlines():
        if 'Function :' in line:
            if name:
                yield name, body
            name, body = line.split('Function :')[1].strip(), []
        elif name:
            m = LINE.match(line)
            if m:
                body.append((int(m.group(1), 16), m.group(2), m.group(4)))
    if name:
        yield name, body


def main_loop(body):
    """The backward branch whose [target, branch] range holds the most MMA instructions."""
    best = None
    for i, (addr, op, args) in enumerate(body):
        if op != 'BRA':
            continue
        m = re.search(r'0x([0-9a-f]+)', args)
        if not m or int(m.group(1), 16) >= addr:
            continue
        target = int(m.group(1), 16)
        loop = [x for x in body if target <= x[0] <= addr]
        mmas = sum(1 for x in loop if x[1] in PIPES['mma'])
        if best is None or mmas > best[0]:
            best = (mmas, loop)
    return best[1] if best and best[0] > 0 else []


def pipe_of(op):
    for p, ops in PIPES.items():
        if op in ops:
            return p
    return 'other'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('object')
    ap.add_argument('--kernel', required=True, help='a substring of the mangled kernel name')
    ap.add_argument('--per', type=float, default=0, help='work units per loop iteration (e.g. weights per thread)')
    a = ap.parse_args()
    sass = subprocess.run(['cuobjdump', '-sass', a.object], check=True, capture_output=True, text=True).stdout
    found = False
    for name, body in functions(sass):
        if a.kernel not in name:
            continue
        found = True
        loop = main_loop(body)
        if not loop:
            print(f'{name}: no loop with MMA instructions')
            continue
        ops = collections.Counter(op for _, op, _ in loop)
        pipes = collections.Counter()
        for op, n in ops.items():
            pipes[pipe_of(op)] += n
        total = len(loop)
        per = f' ({total / a.per:.2f} per unit)' if a.per else ''
        print(f'{name}\n  loop: {total} instructions{per}')
        print('  pipes: ' + ', '.join(f'{p} {n}' + (f' ({n / a.per:.2f})' if a.per else '')
                                      for p, n in pipes.most_common()))
        print('  opcodes: ' + ', '.join(f'{op} {n}' for op, n in ops.most_common()))
    if not found:
        sys.exit(f'no function of {a.object} has "{a.kernel}" in its name')


if __name__ == '__main__':
    main()
