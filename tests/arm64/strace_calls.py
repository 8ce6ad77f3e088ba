#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""strace_calls.py LOG...: the distinct system calls an arm64 daemon made, from qemu-user's
-strace logs (tests/arm64/run.sh records them with SDP_QEMU_STRACE_DIR, one file per process
image, named <daemon>.<pid>), in the input format of sdp-seccomp-check (tests/arm64/
seccomp_check.c): "COUNT NAME [ARG0 [ARG1]]" a line, the arguments only where a rule checks
them (socket's domain, clone's flags, prctl's option, ioctl's request).

Which calls run under the daemon's filter: a daemon confines itself before its event loop
starts, so in the daemon's own image the calls from its first epoll_pwait on (as
tests/fakes/scprobe.c assumes); every call of the images it exec'd (the probe helper, the
node-label child: their pid is a clone() result in another log) and of its forked children.
Left out, and counted on stderr: what only the emulator makes happen. qemu 7.2 has no
execveat (its number is "Unknown syscall 281": ENOSYS), so the helper runner falls back to
execve of its path, which a real kernel never sees (execveat succeeds there).
Exit 2 when a checked argument cannot be read (the call is printed)."""
import collections
import os
import re
import sys

CLONE = {
    'CLONE_VM': 0x100, 'CLONE_FS': 0x200, 'CLONE_FILES': 0x400, 'CLONE_SIGHAND': 0x800,
    'CLONE_PIDFD': 0x1000, 'CLONE_PTRACE': 0x2000, 'CLONE_VFORK': 0x4000,
    'CLONE_PARENT': 0x8000, 'CLONE_THREAD': 0x10000, 'CLONE_NEWNS': 0x20000,
    'CLONE_SYSVSEM': 0x40000, 'CLONE_SETTLS': 0x80000, 'CLONE_PARENT_SETTID': 0x100000,
    'CLONE_CHILD_CLEARTID': 0x200000, 'CLONE_DETACHED': 0x400000, 'CLONE_UNTRACED': 0x800000,
    'CLONE_CHILD_SETTID': 0x1000000, 'CLONE_NEWCGROUP': 0x2000000, 'CLONE_NEWUTS': 0x4000000,
    'CLONE_NEWIPC': 0x8000000, 'CLONE_NEWUSER': 0x10000000, 'CLONE_NEWPID': 0x20000000,
    'CLONE_NEWNET': 0x40000000, 'CLONE_IO': 0x80000000,
}
PF = {'PF_UNSPEC': 0, 'PF_UNIX': 1, 'PF_LOCAL': 1, 'PF_INET': 2, 'PF_INET6': 10,
      'PF_NETLINK': 16, 'PF_PACKET': 17}
# ioctl requests qemu prints by name (those it translates): the companions' probe
# (hyperlight/probe.c; the numbers are asserted there)
IOCTL = {'TUNGETFEATURES': 0x800454cf, 'VHOST_GET_FEATURES': 0x8008af00}
CALL = re.compile(r'^(\d+) (?:Unknown syscall (\d+)|([a-z_0-9]+)\((.*))$')
CLONED = re.compile(r'^\d+ clone\(.*\) = (\d+)$')
EMULATOR_ONLY = {'execve', '#281'}


def number(word, table=None):
    word = word.strip()
    if table is not None and word in table:
        return table[word]
    return int(word, 0)


def args_of(name, text):
    """The checked arguments of one call, as numbers; None when they cannot be read."""
    parts = text.split(',')
    try:
        if name == 'socket':
            return [number(parts[0], PF)]
        if name == 'clone':
            return [sum(number(f, CLONE) for f in parts[0].split('|'))]
        if name == 'prctl':
            return [number(parts[0])]
        if name == 'ioctl':
            return [number(parts[0]), number(parts[1], IOCTL)]
    except (ValueError, IndexError):
        return None
    return []


def main(paths):
    cloned = set()
    for path in paths:
        with open(path, errors='replace') as f:
            for line in f:
                m = CLONED.match(line.rstrip('\n'))
                if m:
                    cloned.add(m.group(1))
    calls = collections.Counter()
    left_out = collections.Counter()
    bad = 0
    for path in paths:
        pid = path.rsplit('.', 1)[-1]
        confined = pid in cloned  # an image the daemon exec'd: its filter from the start
        with open(path, errors='replace') as f:
            for line in f:
                m = CALL.match(line.rstrip('\n'))
                if not m:
                    continue
                who, unknown, name, rest = m.groups()
                name = '#' + unknown if unknown else name
                if who == pid and not confined:
                    if name != 'epoll_pwait':
                        continue
                    confined = True
                if name in EMULATOR_ONLY:
                    left_out[name] += 1
                    continue
                args = [] if unknown else args_of(name, rest or '')
                if args is None:
                    print('unreadable arguments: ' + line.rstrip('\n'), file=sys.stderr)
                    bad += 1
                    continue
                calls[' '.join([name] + [hex(a) for a in args])] += 1
    for call, count in sorted(calls.items()):
        print(count, call)
    if left_out:
        print('left out (the emulator\'s, not the daemon\'s): ' +
              ', '.join('%s x%d' % kv for kv in sorted(left_out.items())), file=sys.stderr)
    return 2 if bad else 0


if __name__ == '__main__':
    sys.exit(main([p for p in sys.argv[1:] if os.path.isfile(p)]))
