#!/usr/bin/python3
"""Where a run's CPU went, by program and by what started it, from a BSD
process accounting file (the kernel's acct v3 records: Debian's `acct`).

  accton /var/tmp/run.acct; time bash .ci/run; accton off
  /usr/bin/python3 bench/cpu_by_program.py /var/tmp/run.acct [--top 40]

Every exited process has a record: its command name (15 characters; a
process is named after its last thread to exit), its user and system
time, its start and its parent. The parent chain names the context: the
nearest ninja, ctest, podman, conmon, slurmstepd, apt-get or dpkg above a
process, outermost first (`podman>ninja | cc1plus` is a compile in a
podman build, `conmon>ninja` one in a `podman run`). A process still
running when accounting stops is not counted.
"""
import argparse
import collections
import struct

# ac_flag, ac_version, ac_tty, ac_exitcode, ac_uid, ac_gid, ac_pid, ac_ppid,
# ac_btime, ac_etime (float), 8 comp_t (utime, stime, mem, io, rw, minflt,
# majflt, swaps), ac_comm[16]: struct acct_v3 of <linux/acct.h>.
RECORD = struct.Struct('<BBHIIIIIIf8H16s')
HZ = 100  # AHZ: the unit of comp_t times and of ac_etime
CONTEXTS = {'ninja', 'ctest', 'podman', 'conmon', 'slurmstepd', 'apt-get', 'dpkg'}


def comp_t(v):
    """A comp_t: 13 bits of mantissa, 3 of base-8 exponent."""
    return (v & 0x1fff) << (3 * (v >> 13))


def load(path):
    data = open(path, 'rb').read()
    if len(data) % RECORD.size:
        raise SystemExit(f'{path}: {len(data)} bytes is not a whole number of '
                         f'{RECORD.size}-byte acct v3 records')
    records = []
    for off in range(0, len(data), RECORD.size):
        f = RECORD.unpack_from(data, off)
        if f[1] != 3:
            raise SystemExit(f'{path}: record {off // RECORD.size} is acct version {f[1]}, expected 3')
        records.append(dict(pid=f[6], ppid=f[7], start=f[8], elapsed=f[9] / HZ,
                            user=comp_t(f[10]) / HZ, system=comp_t(f[11]) / HZ,
                            comm=f[18].split(b'\0')[0].decode(errors='replace')))
    return records


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('file')
    ap.add_argument('--top', type=int, default=40)
    a = ap.parse_args()
    records = load(a.file)
    by_pid = collections.defaultdict(list)
    for r in records:
        by_pid[r['pid']].append(r)

    def parent(r):
        # Process ids are reused: the parent is the process of that id that
        # was alive when this one started (times are whole seconds).
        alive = [p for p in by_pid.get(r['ppid'], ()) if p is not r and
                 p['start'] <= r['start'] + 1 and p['start'] + p['elapsed'] >= r['start'] - 2]
        return max(alive, key=lambda p: p['start'], default=None)

    def context(r):
        # At most 64 ancestors: two records of one second can name each
        # other as parent (ids reused), and the climb must end.
        names, p = [], parent(r)
        for _ in range(64):
            if p is None:
                break
            if p['comm'] in CONTEXTS and p['comm'] not in names:
                names.append(p['comm'])
            p = parent(p)
        return '>'.join(reversed(names)) or '-'

    def table(key, title):
        sums = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for r in records:
            s = sums[key(r)]
            s[0] += 1
            s[1] += r['user']
            s[2] += r['system']
        print(f'{title:56s} {"processes":>9s} {"user s":>9s} {"system s":>9s}')
        for k, (n, u, s) in sorted(sums.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:a.top]:
            print(f'{k:56s} {n:9d} {u:9.1f} {s:9.1f}')
        print()

    print(f'{a.file}: {len(records)} processes, user {sum(r["user"] for r in records):.0f} s, '
          f'system {sum(r["system"] for r in records):.0f} s\n')
    table(lambda r: r['comm'], 'program')
    table(lambda r: f'{context(r)} | {r["comm"]}', 'context | program')


if __name__ == '__main__':
    main()
