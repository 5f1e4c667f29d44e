#!/usr/bin/env python3
"""Import cycles between the modules of each crate under crates/ (docs/architecture.md:
modules import downwards only). Python 3 standard library only.

The module tree is read as rustc reads it: from each crate root (src/lib.rs, src/main.rs,
src/bin/*.rs) through its `mod NAME;` declarations (with `#[path]`) and inline
`mod NAME { ... }` blocks. Items that exist only in test builds (`#[cfg(test)]`,
`#[cfg(all(test, ...))]`) are left out, and so are comments and literals. Module A depends
on module B when A's code names a path `crate::...`, `super::...` or `self::...` (in a `use`
tree or anywhere else) whose longest prefix naming a module is B. A module and its own
ancestors or descendants are not counted as depending on each other: a parent declares and
re-exports its children, a child uses its parent's items. A cycle is a strongly connected
component of more than one module.

Prints one line per cycle (`CRATE: a <-> b`), then `cycles: N` last. Exit status 0 when
there is none, 1 when there is a cycle, 2 on any error (a declared module without its
file, an unterminated comment or literal, unbalanced brackets, no crates/ directory).

    .ci/mod_cycles.py [REPOSITORY_ROOT]
"""

import os
import sys

SYMBOLS = "{}()[];,#!*=<>.&:"


class CheckError(Exception):
    """Something the checker cannot read: CI fails instead of guessing."""


# ---------------------------------------------------------------------------- tokens


def tokenize(text, where):
    """Identifiers, `::`, single symbols and ("str", value) for string literals; comments,
    other literals, numbers and lifetimes are dropped."""
    tokens, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            i = skip_block_comment(text, i, where)
        elif c == '"':
            value, i = read_string(text, i + 1, where)
            tokens.append(("str", value))
        elif c == "'":
            i = skip_quote(text, i, where)
        elif c.isalpha() or c == "_":
            i = read_word(text, i, tokens, where)
        elif c.isdigit():
            while i < n and (text[i].isalnum() or text[i] in "._"):
                i += 1
        elif text.startswith("::", i):
            tokens.append("::")
            i += 2
        else:
            if c in SYMBOLS or c == "$":
                tokens.append(c)
            i += 1
    return tokens


def skip_block_comment(text, i, where):
    depth, i = 1, i + 2
    while depth:
        if i >= len(text):
            raise CheckError(f"{where}: unterminated block comment")
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


def read_string(text, i, where):
    """The body of a "..." literal starting at i (after the quote); returns (value, end)."""
    out = []
    while i < len(text):
        c = text[i]
        if c == "\\":
            out.append(text[i : i + 2])
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise CheckError(f"{where}: unterminated string literal")


def read_raw_string(text, i, where):
    """A raw string whose `#`s start at i; returns (value, end)."""
    hashes = 0
    while text[i] == "#":
        hashes, i = hashes + 1, i + 1
    if text[i] != '"':
        raise CheckError(f"{where}: malformed raw string")
    close = '"' + "#" * hashes
    end = text.find(close, i + 1)
    if end < 0:
        raise CheckError(f"{where}: unterminated raw string")
    return text[i + 1 : end], end + len(close)


def skip_quote(text, i, where):
    """A character literal ('a', '\\n', '\\u{..}') or a lifetime / label ('a)."""
    if text.startswith("'\\", i):
        end = text.find("'", i + 3)
        if end < 0:
            raise CheckError(f"{where}: unterminated character literal")
        return end + 1
    if i + 2 < len(text) and text[i + 2] == "'":
        return i + 3
    i += 1
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    return i


def read_word(text, i, tokens, where):
    """An identifier, or a prefixed literal (b"", r"", r#""#, br"", c"", b'x')."""
    start = i
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    word, nxt = text[start:i], text[i] if i < len(text) else ""
    if word in ("r", "br", "cr") and nxt in '"#':
        if nxt == "#" and i + 1 < len(text) and (text[i + 1].isalpha() or text[i + 1] == "_"):
            return read_word(text, i + 1, tokens, where)  # r#ident: a raw identifier
        value, i = read_raw_string(text, i, where)
        tokens.append(("str", value))
        return i
    if word in ("b", "c") and nxt == '"':
        value, i = read_string(text, i + 1, where)
        tokens.append(("str", value))
        return i
    if word == "b" and nxt == "'":
        return skip_quote(text, i, where)
    tokens.append(word)
    return i


# ------------------------------------------------------------------- cfg and attributes


def cfg_without_test(tokens):
    """Whether `cfg(PREDICATE)` (tokens of PREDICATE) can hold in a build without `test`:
    unknown predicates may hold, `test` does not."""
    value, _ = eval_predicate(tokens, 0)
    return value


def eval_predicate(tokens, i):
    name = tokens[i]
    if name in ("all", "any", "not") and i + 1 < len(tokens) and tokens[i + 1] == "(":
        values, i = [], i + 2
        while tokens[i] != ")":
            value, i = eval_predicate(tokens, i)
            values.append(value)
            if tokens[i] == ",":
                i += 1
        i += 1
        if name == "all":
            return all(values), i
        if name == "any":
            return any(values), i
        return not values[0], i
    i += 1
    if i < len(tokens) and tokens[i] == "=":
        i += 2
    return name != "test", i


def attribute_meaning(attribute):
    """("test-only", None), ("path", VALUE) or (None, None) for the tokens inside #[...]."""
    if attribute[:2] == ["cfg", "("] and not cfg_without_test(attribute[2:-1]):
        return "test-only", None
    if len(attribute) == 3 and attribute[:2] == ["path", "="] and isinstance(attribute[2], tuple):
        return "path", attribute[2][1]
    return None, None


def matching(tokens, i, where):
    """The index after the bracket group opening at tokens[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    while i < len(tokens):
        t = tokens[i]
        if t in pairs:
            stack.append(pairs[t])
        elif t in (")", "]", "}"):
            if not stack or stack.pop() != t:
                raise CheckError(f"{where}: unbalanced {t}")
            if not stack:
                return i + 1
        i += 1
    raise CheckError(f"{where}: unclosed bracket")


def skip_item(tokens, i, where):
    """The index after the item starting at i: after its `;` or its outermost `{...}`,
    or at the bracket that closes the enclosing block."""
    while i < len(tokens):
        t = tokens[i]
        if t == ";":
            return i + 1
        if t in ("(", "["):
            i = matching(tokens, i, where)
        elif t == "{":
            return matching(tokens, i, where)
        elif t in (")", "]", "}"):
            return i
        else:
            i += 1
    return i


# ------------------------------------------------------------------------- modules


class Crate:
    """One crate root's module tree and the module paths each module names."""

    def __init__(self, label):
        self.label = label
        self.modules = set()  # module paths (tuples of names); () is the root
        self.names = {}  # module path -> list of (kind, segments) it names
        self.test_only = set()  # modules that exist only in test builds


def owner_dir(file, is_mod_rs):
    """Where `mod x;` of this file looks for x.rs and x/mod.rs."""
    if is_mod_rs:
        return os.path.dirname(file)
    return os.path.splitext(file)[0]


def module_file(directory, name, where):
    candidates = [os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")]
    found = [c for c in candidates if os.path.isfile(c)]
    if len(found) != 1:
        what = "both " + " and ".join(found) if found else "neither " + " nor ".join(candidates)
        raise CheckError(f"{where}: `mod {name};` has {what}")
    return found[0]


def read_file(crate, path, file, is_mod_rs):
    """Reads module `path` from `file` and, through its declarations, every module below."""
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckError(f"{file}: {error}") from error
    tokens = tokenize(text, file)
    context = {
        "crate": crate,
        "file": file,
        "file_dir": os.path.dirname(file),
        "owner": owner_dir(file, is_mod_rs),
        "tokens": tokens,
    }
    crate.modules.add(path)
    crate.names.setdefault(path, [])
    try:
        i = inner_attributes(context, path, 0)
        end = read_block(context, path, [], i)
    except IndexError as error:
        raise CheckError(f"{file}: the file ends inside an item") from error
    if end != len(tokens):
        raise CheckError(f"{file}: unbalanced `{tokens[end]}`")


def inner_attributes(context, path, i):
    """Skips the file's `#![...]`; a `#![cfg(test)]` makes the module test-only."""
    tokens = context["tokens"]
    while tokens[i : i + 3] == ["#", "!", "["]:
        end = matching(tokens, i + 2, context["file"])
        if attribute_meaning(tokens[i + 3 : end - 1])[0] == "test-only":
            context["crate"].test_only.add(path)
        i = end
    return i


def read_block(context, path, inline, i):
    """Reads items of module `path` from tokens[i] to the `}` that closes its block (or the
    end of the file); `inline` names the inline modules between the file and `path`.
    Returns the index of that `}` (or the length)."""
    tokens, where = context["tokens"], context["file"]
    attributes = []
    while i < len(tokens):
        t = tokens[i]
        if t == "}":
            return i
        if t == "#" and tokens[i + 1 : i + 2] == ["["]:
            end = matching(tokens, i + 1, where)
            attributes.append(attribute_meaning(tokens[i + 2 : end - 1]))
            i = end
            continue
        if ("test-only", None) in attributes:
            i, attributes = skip_item(tokens, i, where), []
            continue
        if t == "pub":  # visibility: the attributes still apply to the item after it
            i = matching(tokens, i + 1, where) if tokens[i + 1 : i + 2] == ["("] else i + 1
            continue
        if t == "mod" and is_name(tokens, i + 1) and tokens[i + 2 : i + 3] in (["{"], [";"]):
            i = read_mod(context, path, inline, i, dict(attributes))
        elif t == "use" and tokens[i + 1 : i + 2] != ["<"]:  # not `impl Trait + use<'a>`
            i = read_use(context, path, i + 1)
        elif t in ("crate", "super", "self") and tokens[i + 1 : i + 2] == ["::"]:
            i = read_path(context, path, i)
        elif t in ("{", "(", "["):
            i = read_nested(context, path, inline, i)
        elif t in (")", "]"):
            raise CheckError(f"{where}: unbalanced `{t}`")
        else:
            i += 1
        attributes = []
    return i


def is_name(tokens, i):
    return i < len(tokens) and isinstance(tokens[i], str) and (tokens[i][0].isalpha() or tokens[i][0] == "_")


def read_nested(context, path, inline, i):
    """A bracket group inside a module: its code belongs to the same module."""
    tokens, where = context["tokens"], context["file"]
    close = {"{": "}", "(": ")", "[": "]"}[tokens[i]]
    if close == "}":
        end = read_block(context, path, inline, i + 1)
    else:
        end = i + 1
        while end < len(tokens) and tokens[end] != close:
            if tokens[end] in ("{", "(", "["):
                end = read_nested(context, path, inline, end)
            elif tokens[end] in ("crate", "super", "self") and tokens[end + 1 : end + 2] == ["::"]:
                end = read_path(context, path, end)
            elif tokens[end] in ("}", ")", "]"):
                raise CheckError(f"{where}: unbalanced `{tokens[end]}`")
            else:
                end += 1
    if end >= len(tokens) or tokens[end] != close:
        raise CheckError(f"{where}: unclosed `{tokens[i]}`")
    return end + 1


def read_mod(context, path, inline, i, attributes):
    """`mod NAME;` (a file, read now) or `mod NAME { ... }` (inline)."""
    tokens, crate = context["tokens"], context["crate"]
    name = tokens[i + 1]
    child = path + (name,)
    if tokens[i + 2] == "{":
        crate.modules.add(child)
        crate.names.setdefault(child, [])
        end = read_block(context, child, inline + [name], i + 3)
        if end >= len(tokens):
            raise CheckError(f"{context['file']}: unclosed `mod {name} {{`")
        return end + 1
    if "path" in attributes:
        base = context["file_dir"] if not inline else os.path.join(context["owner"], *inline)
        file = os.path.normpath(os.path.join(base, attributes["path"]))
        if not os.path.isfile(file):
            raise CheckError(f"{context['file']}: #[path] of `mod {name};`: no {file}")
        read_file(crate, child, file, True)
    else:
        directory = os.path.join(context["owner"], *inline)
        file = module_file(directory, name, context["file"])
        read_file(crate, child, file, file.endswith(os.sep + "mod.rs"))
    return i + 3


# --------------------------------------------------------------------------- paths


def read_path(context, path, i):
    """`crate::a::b`, `super::super::c`, `self::d` in code: recorded; returns the index
    after the path."""
    tokens = context["tokens"]
    segments = [tokens[i]]
    i += 1
    while tokens[i : i + 1] == ["::"] and is_name(tokens, i + 1):
        segments.append(tokens[i + 1])
        i += 2
    record(context["crate"], path, segments)
    return i


def read_use(context, path, i):
    """A `use` tree up to its `;`: every leaf path is recorded."""
    tokens, where = context["tokens"], context["file"]
    if tokens[i : i + 1] == ["::"]:
        i += 1  # `use ::name`: another crate
        end = skip_item(tokens, i, where)
        return end
    leaves = []
    i = use_tree(tokens, i, [], leaves, where)
    if tokens[i : i + 1] != [";"]:
        raise CheckError(f"{where}: a `use` that does not end with `;`")
    for leaf in leaves:
        record(context["crate"], path, leaf)
    return i + 1


def use_tree(tokens, i, prefix, leaves, where):
    """Parses one use tree at tokens[i] under `prefix`; appends its leaf paths."""
    segments = list(prefix)
    while True:
        t = tokens[i]
        if t == "{":
            i += 1
            while tokens[i] != "}":
                i = use_tree(tokens, i, segments, leaves, where)
                if tokens[i] == ",":
                    i += 1
            return i + 1
        if t == "*":
            leaves.append(segments)
            return i + 1
        if not is_name(tokens, i):
            raise CheckError(f"{where}: cannot read a `use` tree at `{t}`")
        if t != "self" or not segments:
            segments.append(t)  # `a::{self}` names `a`
        i += 1
        if tokens[i] == "::":
            i += 1
            continue
        if tokens[i] == "as":
            i += 2
        leaves.append(segments)
        return i


def record(crate, path, segments):
    if segments and segments[0] in ("crate", "super", "self"):
        crate.names[path].append(segments)


def resolve(crate, here, segments):
    """The module a path written in module `here` names: its longest module prefix."""
    kind, rest = segments[0], segments[1:]
    if kind == "crate":
        base = ()
    elif kind == "self":
        base = here
    else:
        base = here[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    for name in rest:
        if base + (name,) not in crate.modules:
            break
        base = base + (name,)
    return base


def dependencies(crate):
    """Module -> the modules it depends on (neither itself, nor an ancestor or descendant)."""
    graph = {}
    for here in crate.modules:
        if in_test_only(crate, here):
            continue
        targets = set()
        for segments in crate.names[here]:
            target = resolve(crate, here, segments)
            related = target[: len(here)] == here or here[: len(target)] == target
            if not related and not in_test_only(crate, target):
                targets.add(target)
        graph[here] = targets
    return graph


def in_test_only(crate, path):
    return any(path[:k] in crate.test_only for k in range(len(path) + 1))


# -------------------------------------------------------------------------- cycles


def strongly_connected(graph):
    """Tarjan's components, iteratively (no recursion limit)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def crate_roots(crate_dir):
    """(label, root file) for the library, the main binary and every src/bin binary."""
    name = os.path.basename(crate_dir)
    src = os.path.join(crate_dir, "src")
    roots = []
    for file, label in (("lib.rs", name), ("main.rs", f"{name} (bin)")):
        if os.path.isfile(os.path.join(src, file)):
            roots.append((label, os.path.join(src, file)))
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        for entry in sorted(os.listdir(bins)):
            if entry.endswith(".rs"):
                roots.append((f"{name} (bin {entry[:-3]})", os.path.join(bins, entry)))
            elif os.path.isfile(os.path.join(bins, entry, "main.rs")):
                roots.append((f"{name} (bin {entry})", os.path.join(bins, entry, "main.rs")))
    return roots


def check(root):
    """Prints every cycle; returns (cycles, modules)."""
    crates_dir = os.path.join(root, "crates")
    if not os.path.isdir(crates_dir):
        raise CheckError(f"no crates/ directory under {root}")
    cycles = modules = 0
    for entry in sorted(os.listdir(crates_dir)):
        crate_dir = os.path.join(crates_dir, entry)
        if not os.path.isfile(os.path.join(crate_dir, "Cargo.toml")):
            continue
        for label, file in crate_roots(crate_dir):
            crate = Crate(label)
            read_file(crate, (), file, True)
            graph = dependencies(crate)
            modules += len(graph)
            for component in strongly_connected(graph):
                if len(component) > 1:
                    cycles += 1
                    names = sorted("::".join(p) or "(root)" for p in component)
                    print(f"{label}: " + " <-> ".join(names))
    return cycles, modules


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    try:
        cycles, modules = check(root)
    except (CheckError, RecursionError) as error:
        print(f"mod_cycles: error: {error}", file=sys.stderr)
        return 2
    print(f"modules: {modules}")
    print(f"cycles: {cycles}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
