#!/usr/bin/env python3
"""Fails when a locked dependency needs a newer Rust than the workspace's `rust-version` says.

The declared MSRV must be true: it is the highest `rust-version` among the packages in
Cargo.lock that a build of the workspace uses (all features, every target).
"""
import json
import subprocess
import sys

meta = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
)
members = set(meta["workspace_members"])
used = {node["id"] for node in meta["resolve"]["nodes"]}


def version(text):
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


declared = {
    p["name"]: version(p["rust_version"]) for p in meta["packages"] if p["id"] in members
}
needed = max(
    (version(p["rust_version"]), f'{p["name"]} {p["version"]}')
    for p in meta["packages"]
    if p["id"] not in members and p["id"] in used and p.get("rust_version")
)
low = {name: v for name, v in declared.items() if v < needed[0]}
if low:
    want = ".".join(map(str, needed[0]))
    print(
        f"error: {needed[1]} needs Rust {want}, but the workspace declares "
        + ", ".join(f"{n} {'.'.join(map(str, v))}" for n, v in sorted(low.items()))
        + f": set `rust-version = \"{want}\"` in the workspace Cargo.toml",
        file=sys.stderr,
    )
    sys.exit(1)
print(f"rust-version is true: the highest a locked dependency needs is {needed[1]}'s")
