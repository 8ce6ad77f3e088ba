#!/usr/bin/env python3
"""Write a one-layer OCI image archive (oci-layout, index.json, blobs) for `ctr images import`.

No registry, no podman: the images of make cluster are files we have on the host.

  oci-image.py OUT.tar NAME:TAG --file SRC:DEST[:MODE] ... [--link DEST:TARGET ...]
               [--dir DEST:MODE ...] [--tree SRC_DIR:DEST ...] [--entrypoint JSON] [--cmd JSON]
               [--env K=V ...]

--tree adds a whole directory: its directories, regular files and symlinks, with their modes
(anything else in it is an error).

NAME is the full reference (localhost/pause:3.10.2); containerd takes it from the
io.containerd.image.name annotation. Every entry is owned by 0:0 with mtime SOURCE_DATE_EPOCH
(default 0), so the same inputs give the same digests.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("ref")
    p.add_argument("--file", action="append", default=[], help="SRC:DEST[:MODE octal]")
    p.add_argument("--link", action="append", default=[], help="DEST:TARGET (symlink)")
    p.add_argument("--dir", action="append", default=[], help="DEST:MODE octal")
    p.add_argument("--tree", action="append", default=[], help="SRC_DIR:DEST")
    p.add_argument("--entrypoint", default=None)
    p.add_argument("--cmd", default=None)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", default="")
    a = p.parse_args()
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

    entries = {}  # path -> TarInfo (+ data)

    def add_parents(path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in entries:
                ti = tarfile.TarInfo(d)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                entries[d] = (ti, None)

    for spec in a.dir:
        dest, mode = spec.rsplit(":", 1)
        dest = dest.strip("/")
        add_parents(dest)
        ti = tarfile.TarInfo(dest)
        ti.type = tarfile.DIRTYPE
        ti.mode = int(mode, 8)
        entries[dest] = (ti, None)
    for spec in a.file:
        parts = spec.split(":")
        src, dest = parts[0], parts[1].strip("/")
        with open(src, "rb") as f:
            data = f.read()
        mode = int(parts[2], 8) if len(parts) > 2 else (0o755 if os.access(src, os.X_OK) else 0o644)
        add_parents(dest)
        ti = tarfile.TarInfo(dest)
        ti.size = len(data)
        ti.mode = mode
        entries[dest] = (ti, data)
    for spec in a.tree:
        src, dest = spec.split(":", 1)
        dest = dest.strip("/")
        for dirpath, dirnames, filenames in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            base = dest if rel == "." else (dest + "/" + rel if dest else rel)
            for name in sorted(dirnames + filenames):
                path = os.path.join(dirpath, name)
                target = (base + "/" + name).strip("/")
                st = os.lstat(path)
                add_parents(target)
                ti = tarfile.TarInfo(target)
                ti.mode = st.st_mode & 0o7777
                data = None
                if os.path.islink(path):
                    ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                elif os.path.isdir(path):
                    ti.type = tarfile.DIRTYPE
                elif os.path.isfile(path):
                    with open(path, "rb") as f:
                        data = f.read()
                    ti.size = len(data)
                else:
                    sys.exit(f"oci-image.py: {path} is neither a directory, a regular file nor a symlink")
                entries[target] = (ti, data)
    for spec in a.link:
        dest, target = spec.split(":", 1)
        dest = dest.strip("/")
        add_parents(dest)
        ti = tarfile.TarInfo(dest)
        ti.type = tarfile.SYMTYPE
        ti.linkname = target
        ti.mode = 0o777
        entries[dest] = (ti, None)

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path in sorted(entries):
            ti, data = entries[path]
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mtime = mtime
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    layer = layer.getvalue()

    blobs = {}

    def blob(data):
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return d, len(data)

    ldig, lsize = blob(layer)
    config = {
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": a.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [ldig]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "cluster/oci-image.py"}],
    }
    if a.entrypoint:
        config["config"]["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        config["config"]["Cmd"] = json.loads(a.cmd)
    if a.user:
        config["config"]["User"] = a.user
    cdig, csize = blob(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": csize},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ldig, "size": lsize}],
    }
    mdig, msize = blob(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    tag = a.ref.rsplit(":", 1)[1] if ":" in a.ref.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": mdig, "size": msize,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": a.ref, "org.opencontainers.image.ref.name": tag},
        }],
    }

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = mtime
            t.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for d in sorted(blobs):
            add("blobs/sha256/" + d.split(":", 1)[1], blobs[d])
    os.replace(tmp, a.out)
    print(f"{a.ref} {mdig}")


if __name__ == "__main__":
    sys.exit(main())
