#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# build-info: what a configured meson build directory says, for the scripts that build or run
# outside meson (tests/run.sh, tests/valgrind.sh, fuzz/build.sh, make lint), so that the source
# lists and the warning flags exist once, in the meson.build files.
#
#   build-info.py tests BUILD          the unit-test executables (targets named test_*), one
#                                      path a line, sorted by name
#   build-info.py sources BUILD LIB    the C sources of the static library LIB (dp, dpproto,
#                                      kata, hyperlight, hyperlight-label-node), generated ones
#                                      included, one absolute path a line
#   build-info.py cflags BUILD FILE    the flags meson compiles FILE with (from
#                                      BUILD/compile_commands.json), one a line: defines,
#                                      warnings, -std, -O, -g, include directories made
#                                      absolute; without the compiler, -c, -o and the
#                                      dependency-file options
import json
import os
import shlex
import subprocess
import sys


def targets(build):
    out = subprocess.run(['meson', 'introspect', build, '--targets'], check=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out)


def cmd_tests(build):
    found = sorted((t['name'], f) for t in targets(build)
                   if t['type'] == 'executable' and t['name'].startswith('test_')
                   for f in t['filename'])
    return [f for _, f in found]


def cmd_sources(build, lib):
    for t in targets(build):
        if t['type'] == 'static library' and t['name'] == lib:
            return [s for ts in t['target_sources'] if ts['language'] == 'c'
                    for s in ts['sources'] + ts['generated_sources'] if s.endswith('.c')]
    sys.exit(f'build-info: no static library {lib} in {build}')


# Options that take their value as the next word, and what is dropped with it.
DROP_WITH_VALUE = {'-o', '-c', '-MQ', '-MF', '-MT'}
DROP = {'-MD', '-MMD', '-pipe'}


def cmd_cflags(build, path):
    want = os.path.realpath(path)
    with open(os.path.join(build, 'compile_commands.json')) as f:
        entries = json.load(f)
    for e in entries:
        if os.path.realpath(os.path.join(e['directory'], e['file'])) != want:
            continue
        words = shlex.split(e['command']) if 'command' in e else list(e['arguments'])
        flags, skip = [], False
        for w in words[1:]:
            if skip:
                skip = False
            elif w in DROP_WITH_VALUE:
                skip = True
            elif w in DROP or w.startswith('-fdiagnostics-color'):
                pass
            elif w.startswith('-I'):
                flags.append('-I' + os.path.normpath(os.path.join(e['directory'], w[2:])))
            elif w.startswith('-'):
                flags.append(w)
        return flags
    sys.exit(f'build-info: {path} is compiled by no target of {build} (compile_commands.json)')


def main(argv):
    if len(argv) == 3 and argv[1] == 'tests':
        lines = cmd_tests(argv[2])
    elif len(argv) == 4 and argv[1] == 'sources':
        lines = cmd_sources(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == 'cflags':
        lines = cmd_cflags(argv[2], argv[3])
    else:
        sys.exit('usage: build-info.py tests BUILD | sources BUILD LIB | cflags BUILD FILE')
    for line in lines:
        print(line)


if __name__ == '__main__':
    main(sys.argv)
