#!/usr/bin/env python3
"""The values table of a chart README, generated from values.schema.json (descriptions, types,
enums) and values.yaml (defaults). Reads the README on stdin and writes it to stdout with the
part between <!-- values:begin --> and <!-- values:end --> replaced.

    helm-readme.py values.schema.json values.yaml < README.md > README.md.new

scripts/render-manifests.sh runs it (make manifests) and checks it for drift (make test).
"""
import json
import sys

import yaml

BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"


def resolve(schema, root):
    ref = schema.get("$ref")
    if ref:
        target = root
        for part in ref.lstrip("#/").split("/"):
            target = target[part]
        merged = dict(target)
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        return merged
    return schema


def type_of(s):
    if "const" in s:
        return "`%s` (fixed)" % json.dumps(s["const"])
    if "enum" in s:
        return " | ".join("`%s`" % v for v in s["enum"])
    t = s.get("type", "any")
    return " or ".join(t) if isinstance(t, list) else t


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def rows(schema, values, root, prefix=""):
    out = []
    for key, sub in schema.get("properties", {}).items():
        s = resolve(sub, root)
        name = prefix + key
        default = values.get(key) if isinstance(values, dict) else None
        if s.get("type") == "object" and "properties" in s and s.get("additionalProperties") is False \
                and name not in ("resources", "deviceAccess.resources"):
            if s.get("description"):
                out.append((name, "object", "", s["description"]))
            out += rows(s, default or {}, root, name + ".")
            continue
        out.append((name, type_of(s), "`%s`" % json.dumps(default, separators=(", ", ": ")), s.get("description", "")))
    return out


def table(schema_path, values_path):
    with open(schema_path) as f:
        schema = json.load(f)
    with open(values_path) as f:
        values = yaml.safe_load(f)
    lines = [BEGIN,
             "<!-- generated from values.schema.json and values.yaml by scripts/helm-readme.py (make manifests) -->",
             "", "| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, typ, default, desc in rows(schema, values, schema):
        lines.append("| `%s` | %s | %s | %s |" % (name, cell(typ), cell(default), cell(desc)))
    lines += ["", END]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    text = sys.stdin.read()
    if BEGIN not in text or END not in text:
        sys.exit("helm-readme: the README has no %s ... %s section" % (BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    sys.stdout.write(head + table(sys.argv[1], sys.argv[2]) + tail)


if __name__ == "__main__":
    main()
