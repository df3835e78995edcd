#!/usr/bin/python3
"""bench/cpu_by_program.py on an accounting file written here, record by
record as the kernel writes acct v3: the sums by program and by context,
a process id reused by a later parent, comp_t's exponent, a file that
is not whole records refused naming it, and a parent cycle that ends.

  cpu_by_program_test.py SOURCE_DIR"""
import os
import struct
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], 'bench', 'cpu_by_program.py')
RECORD = struct.Struct('<BBHIIIIIIf8H16s')
T = 1796571455


def comp_t(ticks):
    exp = 0
    while ticks > 0x1fff:
        assert ticks % 8 == 0, ticks
        ticks //= 8
        exp += 1
    return (exp << 13) | ticks


def record(pid, ppid, start, elapsed_s, user_ticks, system_ticks, comm):
    return RECORD.pack(0, 3, 0, 0, 0, 0, pid, ppid, T + start, elapsed_s * 100.0,
                       comp_t(user_ticks), comp_t(system_ticks), 0, 0, 0, 0, 0, 0, comm.encode())


def fail(what, out):
    print(f'FAIL: {what}\n{out}')
    sys.exit(1)


# Written at exit, children first: ninja's two compiles (one of 100 s, past
# comp_t's 13 bits), then ninja; later the same pid 100 is a ctest whose
# trainer must not count as ninja's.
records = [
    record(101, 100, 1, 10, 1250, 50, 'cc1plus'),
    record(102, 100, 2, 90, 10000, 0, 'cc1plus'),
    record(100, 1, 0, 95, 100, 0, 'ninja'),
    record(103, 100, 101, 5, 200, 30, 'scdino-trainer'),
    record(100, 1, 100, 10, 0, 0, 'ctest'),
]
with tempfile.TemporaryDirectory() as tmp:
    good = os.path.join(tmp, 'run.acct')
    with open(good, 'wb') as f:
        f.write(b''.join(records))
    out = subprocess.run([sys.executable, script, good], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f'exit {out.returncode}', out.stdout + out.stderr)
    lines = [' '.join(line.split()) for line in out.stdout.splitlines()]
    for want in (f'{good}: 5 processes, user 116 s, system 1 s',
                 'cc1plus 2 112.5 0.5',
                 'ninja | cc1plus 2 112.5 0.5',
                 'ctest | scdino-trainer 1 2.0 0.3',
                 '- | ninja 1 1.0 0.0'):
        if want not in lines:
            fail(f'no line "{want}"', out.stdout)
    print('ok: sums by program and by context, a reused pid, comp_t above 13 bits')

    bad = os.path.join(tmp, 'cut.acct')
    with open(bad, 'wb') as f:
        f.write(b''.join(records)[:-10])
    out = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
    if out.returncode == 0 or f'{bad}: 310 bytes is not a whole number of 64-byte acct v3 records' not in out.stderr:
        fail(f'a cut file: exit {out.returncode}', out.stdout + out.stderr)
    print('ok: a file cut mid-record is refused, naming it and its size')

    # Two processes of one second that name each other as parent (reused ids).
    loop = os.path.join(tmp, 'loop.acct')
    with open(loop, 'wb') as f:
        f.write(record(200, 201, 300, 1, 10, 0, 'a') + record(201, 200, 300, 1, 10, 0, 'b'))
    try:
        out = subprocess.run([sys.executable, script, loop], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        fail('two records naming each other as parent: no answer in 30 s', '')
    if out.returncode != 0 or '- | a 1 0.1 0.0' not in [' '.join(line.split()) for line in out.stdout.splitlines()]:
        fail(f'two records naming each other as parent: exit {out.returncode}', out.stdout + out.stderr)
    print('ok: two records naming each other as parent end the climb')
