#!/usr/bin/env python3
"""Checks a crate's module layering against the order its lib.rs states.

    scripts/check-layers.py crates/inflight-lab [crates/inflight-capacity ...]

The crate root's docs hold a section headed `# Layers`: a list from the top layer down, one layer a
line, each line naming its modules in backticks, e.g.

    //! # Layers
    //!
    //! From the top down: a module uses only modules on lower lines.
    //!
    //! - `run`
    //! - `report`
    //! - `hypothesis`, `runner`
    //! - `results`

A module (a top-level `src/NAME.rs` or `src/NAME/` folder) may name, as `crate::OTHER`, only
modules on lower lines; two modules on one line may not name each other. Every top-level module
must be listed. Comments are not read; everything else is, tests included. Items reached through
the crate root's re-exports (`crate::Type`) are not checked: name the module instead. Exits 1 listing each
offending line, 0 when the layering holds.
"""
import re
import sys
from pathlib import Path


def strip_comments(text):
    out = []
    for line in text.splitlines():
        s = line.lstrip()
        if s.startswith("//"):
            out.append("")
            continue
        # drop trailing line comments outside strings (good enough: no `//` in lab strings matters)
        idx = line.find("//")
        while idx != -1:
            before = line[:idx]
            if before.count('"') % 2 == 0:
                line = before
                break
            idx = line.find("//", idx + 2)
        out.append(line)
    return out


def layers_of(lib_rs):
    text = lib_rs.read_text()
    m = re.search(r"^//! # Layers\s*$", text, re.M)
    if not m:
        return None
    layers = []
    for line in text[m.end():].lstrip("\n").splitlines():
        if not line.startswith("//!"):
            break
        body = line[3:].strip()
        if body.startswith("# "):
            break
        if body.startswith("- "):
            names = re.findall(r"`([a-z_][a-z0-9_]*)`", body)
            if names:
                layers.append(names)
    return layers


def referenced(lines):
    """(line number, module) for each `crate::NAME` and each name in `use crate::{a, b::c}`."""
    refs = []
    joined = "\n".join(lines)
    for m in re.finditer(r"\bcrate::\{([^}]*(?:\{[^}]*\}[^}]*)*)\}", joined):
        line_no = joined.count("\n", 0, m.start()) + 1
        depth = 0
        token = ""
        for ch in m.group(1) + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                name = re.match(r"\s*([a-z_][a-z0-9_]*)", token)
                if name:
                    refs.append((line_no, name.group(1)))
                token = ""
                continue
            token += ch
    for m in re.finditer(r"\bcrate::([a-z_][a-z0-9_]*)", joined):
        line_no = joined.count("\n", 0, m.start()) + 1
        refs.append((line_no, m.group(1)))
    return refs


def check(crate):
    src = crate / "src"
    lib = src / "lib.rs"
    layers = layers_of(lib)
    if layers is None:
        return [f"{lib}: no `# Layers` section in the crate docs"]
    rank = {}
    for i, names in enumerate(layers):
        for n in names:
            rank[n] = i
    problems = []
    modules = sorted(
        {p.stem for p in src.glob("*.rs") if p.stem not in ("lib", "main")}
        | {p.name for p in src.iterdir() if p.is_dir()}
    )
    for name in modules:
        if name not in rank:
            problems.append(f"{lib}: module `{name}` is not listed under `# Layers`")
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        top = rel.parts[0].removesuffix(".rs")
        if top in ("lib", "main") or top not in rank:
            continue
        for line_no, used in referenced(strip_comments(path.read_text())):
            if used == top or used not in rank:
                continue
            if rank[used] <= rank[top]:
                where = "beside" if rank[used] == rank[top] else "above"
                problems.append(f"{path}:{line_no}: `{top}` uses `{used}`, which is {where} it")
    return problems


def main(args):
    if not args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    problems = []
    for arg in args:
        problems += check(Path(arg))
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"layering holds in {', '.join(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
