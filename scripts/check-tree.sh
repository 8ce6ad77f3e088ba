#!/bin/bash
# Checks of the source tree's shape (issue 15), one PASS/FAIL line per rule and the closing
# "N passed, M failed" line (tests/result.sh); a FAIL line names every offending file and why.
#   module-table      docs/architecture.md's module table names every core/src/<module>/*.c exactly once,
#                     and every .c it names exists
#   file-length       no product .c/.h (core/, hyperlight/, kata/; not their tests/) over 600 lines
#   main-length       every product main.c under 80 lines
#   file-description  every product .c/.h opens (line 2, after the SPDX line) with one line saying
#                     what it is: `/* name: what it is. */`, or `/*` and ` * name: what it is`
#   meson-targets     no source file (generated ones included) compiled in two meson targets
#   no-libcurl        no mention of libcurl in core/, hyperlight/, kata/, meson files, docs/ and
#                     README.md, except in a docs paragraph that opens with "*Changed from the
#                     design": the record of where the code departs from the design, and why
#   self-test         each rule fails on a small tree that breaks it and passes on a good one
# Usage: scripts/check-tree.sh [BUILD_DIR]   (the tree this script is in; BUILD_DIR for
#                                            `meson introspect`, default build)
#        scripts/check-tree.sh --root DIR --targets JSON   (another tree, targets from a file)
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/result.sh
. "$here/../tests/result.sh"

root=$(cd "$here/.." && pwd)
build=""
targets_json=""
self_test=1
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=$(cd "$2" && pwd) && shift ;;
	--targets) targets_json=$2 && shift ;;
	--no-self-test) self_test=0 ;;
	*) build=$1 ;;
	esac
	shift
done
[ -n "$build" ] || [ -n "$targets_json" ] || build="$root/build"

max_lines=600
max_main=80
desc_name='[A-Za-z0-9_./+-]+( [A-Za-z0-9_./+-]+)?'

# Product sources: core/, hyperlight/, kata/, without the test folders beside them.
product_files() {
	(cd "$root" && find core hyperlight kata -type d -name tests -prune -o -type f \
		\( -name '*.c' -o -name '*.h' \) -print 2>/dev/null | sort)
}

# Run a rule: NAME FUNCTION; the function prints one reason per line, nothing when it holds.
rule() {
	local name=$1 why
	why=$("$2")
	if [ -z "$why" ]; then
		result "$name" 1
	else
		result "$name" 0 "$(printf '%s' "$why" | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/; /g')"
	fi
}

check_module_table() {
	python3 - "$root" <<-'EOF'
		import glob, os, re, sys
		root = sys.argv[1]
		doc = os.path.join(root, "docs/architecture.md")
		try:
		    text = open(doc, encoding="utf-8").read()
		except OSError as e:
		    sys.exit(print(f"docs/architecture.md: {e.strerror}"))
		m = re.search(r"^## Modules.*?$(.*?)(?=^## )", text + "\n## ", re.M | re.S)
		if not m:
		    sys.exit(print("docs/architecture.md: no '## Modules' section"))
		named = []  # the .c files of the table's second column, as paths from the root
		for line in m.group(1).splitlines():
		    cols = line.split("|")
		    if not line.startswith("|") or len(cols) < 4 or set(cols[2].strip()) <= set("-: "):
		        continue
		    for tok in re.findall(r"`([^`]+)`", cols[2]):
		        for name in ([tok[:-5] + ".c"] if tok.endswith(".[ch]") else [tok]):
		            if name.endswith(".c"):
		                named.append(name if name.startswith("core/") else "core/src/" + name)
		for path in sorted(set(named)):
		    if named.count(path) > 1:
		        print(f"docs/architecture.md names {path} {named.count(path)} times in the module table")
		    if not os.path.isfile(os.path.join(root, path)):
		        print(f"docs/architecture.md's module table names {path}: no such file")
		for path in sorted(glob.glob(os.path.join(root, "core/src/**/*.c"), recursive=True)):
		    rel = os.path.relpath(path, root)
		    if rel.count("/") != 3:
		        print(f"{rel}: not in a module's folder (core/src/<module>/)")
		    if rel not in named:
		        print(f"{rel}: not in docs/architecture.md's module table")
	EOF
}

# "LINES PATH" of every product file.
product_lengths() {
	local files
	mapfile -t files < <(product_files)
	[ ${#files[@]} -eq 0 ] || (cd "$root" && wc -l "${files[@]}" | grep -v ' total$')
}

check_file_length() {
	product_lengths | awk -v max=$max_lines '$1 > max { print $2 ": " $1 " lines > " max }'
}

check_main_length() {
	product_lengths | awk -v max=$max_main '$2 ~ /(^|\/)main\.c$/ && $1 >= max {
		print $2 ": " $1 " lines, want under " max }'
}

check_file_description() {
	local f l2 l3
	for f in $(product_files); do
		{ IFS= read -r _; IFS= read -r l2; IFS= read -r l3; } <"$root/$f"
		if [[ $l2 =~ ^/\*\ $desc_name:\ .*[^\ ].*\*/$ ]]; then continue; fi
		if [[ $l2 == "/*" && $l3 =~ ^\ \*\ $desc_name:\ .*[^\ ] ]]; then continue; fi
		echo "$f: no one-line description at line 2"
	done
}

check_meson_targets() {
	local json
	if [ -n "$targets_json" ]; then
		json=$(cat "$targets_json") || return 0
	elif ! json=$(meson introspect "$build" --targets 2>&1); then
		echo "meson introspect $build --targets failed: $(echo "$json" | head -1)"
		return 0
	fi
	printf '%s' "$json" | python3 -c '
import json, os, sys
root, build = sys.argv[1], sys.argv[2]
where = {}
for t in json.load(sys.stdin):
    if t["type"] in ("custom", "run", "alias"):  # generators read inputs; they compile nothing
        continue
    for ts in t.get("target_sources", []):
        for src in ts.get("sources", []) + ts.get("generated_sources", []):
            if src.endswith(".h"):
                continue
            p = os.path.normpath(src)
            if build and p.startswith(build + "/"):
                p = "<build>/" + os.path.relpath(p, build)
            elif p.startswith(root + "/"):
                p = os.path.relpath(p, root)
            where.setdefault(p, []).append(t["name"])
for p, names in sorted(where.items()):
    if len(names) > 1:
        print(f"{p}: in {len(names)} targets ({chr(44).join(names)})")
' "$root" "$(cd "${build:-/nonexistent}" 2>/dev/null && pwd)"
}

# Lines of FILEs that mention libcurl, except inside a paragraph that opens with "*Changed from
# the design" (docs only).
libcurl_lines() {
	awk -v allow="$1" '
		FNR == 1 { para_ok = 0; start = 1 }
		/^[ \t]*$/ { start = 1; next }
		start { para_ok = allow && /^\*Changed from the design/; start = 0 }
		tolower($0) ~ /libcurl/ && !para_ok { print FILENAME ":" FNR ": mentions libcurl" }
	' "${@:2}"
}

check_no_libcurl() {
	local code docs
	cd "$root" || return 0
	mapfile -t code < <(grep -rIil libcurl core hyperlight kata 2>/dev/null
		find . \( -name .git -o -type d -name 'build*' \) -prune -o -type f \
			\( -name meson.build -o -name meson_options.txt -o -name meson.options \) -print |
			sed 's|^\./||')
	mapfile -t docs < <(find docs README.md -type f -name '*.md' 2>/dev/null)
	[ ${#code[@]} -eq 0 ] || libcurl_lines 0 "${code[@]}"
	[ ${#docs[@]} -eq 0 ] || libcurl_lines 1 "${docs[@]}"
}

# A good small tree, then one copy per rule that breaks it: the rule must fail on its copy only.
self_test() {
	local tmp good why="" rc name out
	tmp=$(mktemp -d) || return 0
	good="$tmp/good"
	mkdir -p "$good"/{docs,core/src/a,core/src/b,core/include/dp,core/tests,hyperlight,kata}
	# shellcheck disable=SC2016 # backquotes are Markdown here
	printf '# A\n\n## Modules\n\n| module | source | holds |\n|---|---|---|\n| a | `a/a.c` (`dp/a.h`) | a |\n| b | `b/b.[ch]` | b |\n\n## Next\n\n*Changed from the design* (libcurl): why.\n' >"$good/docs/architecture.md"
	for f in core/src/a/a.c core/src/b/b.c core/src/b/b.h hyperlight/main.c; do
		printf '/* SPDX-License-Identifier: Apache-2.0 */\n/* %s: what it is. */\nint x;\n' "$(basename "$f" .c)" >"$good/$f"
	done
	printf '/* SPDX-License-Identifier: Apache-2.0 */\n/*\n * dp/a.h: what it is,\n * at length.\n */\n' >"$good/core/include/dp/a.h"
	cp "$good/hyperlight/main.c" "$good/kata/main.c"
	seq 700 >"$good/core/tests/test_a.c" # tests are not product files
	echo "project('x', 'c')" >"$good/meson.build"
	printf '[{"name":"one","type":"executable","target_sources":[{"sources":["%s/core/src/a/a.c","%s/core/src/b/b.c"],"generated_sources":["/b/gen.c"]}]},{"name":"two","type":"executable","target_sources":[{"sources":["%s/core/src/b/b.h"],"generated_sources":[]}]},{"name":"gen","type":"custom","target_sources":[{"sources":["%s/core/src/a/a.c"],"generated_sources":[]}]}]\n' \
		"$good" "$good" "$good" "$good" >"$tmp/targets.json"
	out=$("$0" --no-self-test --root "$good" --targets "$tmp/targets.json")
	rc=$?
	[ $rc -eq 0 ] || why="the good tree fails: $(echo "$out" | grep '^FAIL' | head -3)"
	mutate() { # RULE COMMAND...: a copy of the good tree changed by COMMAND (run inside it)
		name=$1
		shift
		rm -rf "$tmp/bad"
		cp -a "$good" "$tmp/bad"
		cp "$tmp/targets.json" "$tmp/bad.json"
		(cd "$tmp/bad" && eval "$*")
		sed -i "s|$good/|$tmp/bad/|g" "$tmp/bad.json"
		out=$("$0" --no-self-test --root "$tmp/bad" --targets "$tmp/bad.json")
		if ! echo "$out" | grep -q "^FAIL $name:" || [ "$(echo "$out" | grep -c '^FAIL')" -ne 1 ]; then
			why="$why${why:+; }$name stays silent on: $*"
		fi
	}
	mutate module-table "cp core/src/a/a.c core/src/a/c.c"
	mutate module-table "cp core/src/a/a.c core/src/c.c && sed -i 's|\`a/a.c\`|\`a/a.c\`, \`c.c\`|' docs/architecture.md"
	mutate module-table "sed -i 's|\`a/a.c\`|\`a/gone.c\`|' docs/architecture.md"
	mutate module-table "sed -i 's|\`b/b.\[ch\]\`|\`b/b.c\`, \`a/a.c\`|' docs/architecture.md"
	mutate file-length "seq 600 >>core/src/b/b.h"
	mutate main-length "seq 77 >>kata/main.c"
	mutate file-description "sed -i '2s/b: what/b what/' core/src/b/b.c"
	mutate file-description "sed -i '3s/ \* dp\/a.h:/ * the header a/' core/include/dp/a.h"
	mutate meson-targets "sed -i 's|\"generated_sources\":\[\]}\]},{\"name\":\"gen\"|\"generated_sources\":[\"/b/gen.c\"]}]},{\"name\":\"gen\"|' ../bad.json"
	mutate no-libcurl "echo '# libcurl' >>meson.build"
	mutate no-libcurl "echo '/* not libcurl */' >>kata/main.c"
	mutate no-libcurl "printf '\nWe use libcurl.\n' >>docs/architecture.md"
	rm -rf "$tmp"
	[ -z "$why" ] || echo "$why"
}

rule "module-table" check_module_table
rule "file-length" check_file_length
rule "main-length" check_main_length
rule "file-description" check_file_description
rule "meson-targets" check_meson_targets
rule "no-libcurl" check_no_libcurl
[ $self_test = 0 ] || rule "self-test" self_test
echo "${passed:?} passed, ${failed:?} failed"
[ "$failed" -eq 0 ]
