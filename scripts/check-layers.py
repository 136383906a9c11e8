#!/usr/bin/env python3
"""Checks a crate's module layering against the order its lib.rs (or main.rs) states.

    scripts/check-layers.py crates/inflight-lab [crates/inflight-capacity ...]
    scripts/check-layers.py --all          # every crate of the workspace
    scripts/check-layers.py --self-test    # shows the check fails on a planted upward import

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
must be listed. Comments are not read; everything else is, tests included. An item reached through
the crate root's re-exports (`crate::Type`) counts as a use of the module it is re-exported from. Exits 1 listing each
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


def reexports(lib_rs):
    """{item: module} for each item the crate root re-exports from one of its modules:
    `pub use budget::{Budget, Permit};`, `pub use config::Budgets;`."""
    found = {}
    text = "\n".join(strip_comments(lib_rs.read_text()))
    for m in re.finditer(r"\bpub(?:\([a-z]+\))?\s+use\s+([a-z_][a-z0-9_]*)::(\{[^;]*\}|[A-Za-z_][A-Za-z0-9_]*)\s*;", text):
        module, items = m.group(1), m.group(2)
        for item in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:,|\}|$)", items.strip("{}") + ","):
            found[item] = module
    return found


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
                name = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", token)
                if name:
                    refs.append((line_no, name.group(1)))
                token = ""
                continue
            token += ch
    for m in re.finditer(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)", joined):
        line_no = joined.count("\n", 0, m.start()) + 1
        refs.append((line_no, m.group(1)))
    return refs


def check(crate):
    src = crate / "src"
    lib = src / "lib.rs"
    if not lib.exists():
        lib = src / "main.rs"
    layers = layers_of(lib)
    if layers is None:
        return [f"{lib}: no `# Layers` section in the crate docs"]
    via_root = reexports(lib)
    rank = {}
    for i, names in enumerate(layers):
        for n in names:
            rank[n] = i
    problems = []
    modules = sorted(
        {p.stem for p in src.glob("*.rs") if p.stem not in ("lib", "main")}
        | {p.name for p in src.iterdir() if p.is_dir() and p.name != "bin"}
    )
    for name in modules:
        if name not in rank:
            problems.append(f"{lib}: module `{name}` is not listed under `# Layers`")
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        top = rel.parts[0].removesuffix(".rs")
        if top in ("lib", "main", "bin") or top not in rank:
            continue
        for line_no, used in referenced(strip_comments(path.read_text())):
            used = via_root.get(used, used)
            if used == top or used not in rank:
                continue
            if rank[used] <= rank[top]:
                where = "beside" if rank[used] == rank[top] else "above"
                problems.append(f"{path}:{line_no}: `{top}` uses `{used}`, which is {where} it")
    return problems


def workspace_crates():
    """The workspace's member crates, from the root Cargo.toml's `members`."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "Cargo.toml").read_text()
    m = re.search(r"^members\s*=\s*\[(.*?)\]", text, re.M | re.S)
    return [str(root / p) for p in re.findall(r'"([^"]+)"', m.group(1))] if m else []


SELF_TEST_LIB = """//! A crate.
//!
//! # Layers
//!
//! - `top`
//! - `middle`
//! - `bottom`, `side`

mod bottom;
mod middle;
mod side;
mod top;
"""


def self_test():
    """Builds a small crate whose layering holds, checks it passes, then plants one upward
    import, one sideways import and one through the root's re-exports, and checks each fails."""
    import tempfile

    plants = {
        "upward": ("bottom.rs", "use crate::middle::M;\n"),
        "sideways": ("side.rs", "use crate::bottom::B;\n"),
        "through the root": ("middle.rs", "pub fn f() -> crate::T { todo!() }\n"),
        "unlisted module": ("extra.rs", "\n"),
    }
    failures = []
    for name, (file, line) in [("none", (None, None))] + list(plants.items()):
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "src"
            src.mkdir()
            (src / "lib.rs").write_text(SELF_TEST_LIB + "pub use top::T;\n")
            (src / "top.rs").write_text("use crate::middle::M;\npub struct T;\n")
            (src / "middle.rs").write_text("use crate::bottom::B;\npub struct M;\n")
            (src / "bottom.rs").write_text("pub struct B;\n")
            (src / "side.rs").write_text("// crate::top in a comment is not read\n")
            if file:
                path = src / file
                path.write_text((path.read_text() if path.exists() else "") + line)
            problems = check(Path(d))
            if file is None and problems:
                failures.append(f"a crate whose layering holds was refused: {problems}")
            if file is not None and not problems:
                failures.append(f"a planted {name} import was not caught")
    for f in failures:
        print(f)
    if failures:
        return 1
    print(f"the layering check catches each of {len(plants)} planted mistakes")
    return 0


def main(args):
    if not args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    if args == ["--self-test"]:
        return self_test()
    if args == ["--all"]:
        args = workspace_crates()
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
