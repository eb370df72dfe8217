"""Reads torch's native_functions.yaml and tags.yaml without PyYAML.

The build's code generator (tools/gen_structured_ops.py) runs in the
environment that builds openmtia, which with --no-build-isolation holds
torch and little else: torch does not depend on PyYAML, and torchgen's own
loader (torchgen.gen) imports it. These two files use a small part of YAML:
a list of block mappings whose values are plain or double-quoted scalars,
flow lists ([a, "b"]), empty flow mappings ({}), nested block mappings (dispatch:), block lists and
literal block scalars (desc: |). This reads exactly that, as torchgen's
LineLoader does (PyYAML's safe loader plus a "__line__" key, 1-based, in
every mapping), and raises on anything else rather than guess.
tests/test_build_tools.py checks it against PyYAML on the installed files.
"""
import re

_INT = re.compile(r"[-+]?[0-9]+$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL = {"null", "Null", "NULL", "~", ""}


class YamlSubsetError(ValueError):
    pass


def _strip_comment(text):
    """text without a trailing comment (a '#' at the start or after a space,
    outside quotes)."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'" and (i == 0 or text[i - 1] in " [,"):
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text, where):
    text = text.strip()
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2 or "\\" in text:
            raise YamlSubsetError(f"{where}: unsupported quoted scalar {text!r}")
        return text[1:-1]
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise YamlSubsetError(f"{where}: unsupported quoted scalar {text!r}")
        return text[1:-1].replace("''", "'")
    if text[:1] in "{&*!%@`|>":
        raise YamlSubsetError(f"{where}: unsupported YAML {text!r}")
    if text in _BOOL:
        return _BOOL[text]
    if text in _NULL:
        return None
    if _INT.match(text):
        return int(text)
    return text


def _value(text, where):
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlSubsetError(f"{where}: unsupported flow list {text!r}")
        inner = text[1:-1].strip()
        return [_scalar(item, where) for item in inner.split(",")] if inner else []
    return _scalar(text, where)


def _split_key(text, where):
    """'key: value' -> (key, value text); the key is a plain scalar."""
    m = re.match(r"([^:#\[\]{}\"']+?):(?:\s+(.*))?$", text)
    if not m:
        raise YamlSubsetError(f"{where}: expected 'key: value', got {text!r}")
    return m.group(1).strip(), (m.group(2) or "")


def load(path):
    """The file's top-level list of mappings, as torchgen's LineLoader gives it."""
    with open(path) as f:
        raw = f.read().split("\n")
    # (line number, indent, text) of each line that holds something
    lines = []
    for n, line in enumerate(raw, 1):
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise YamlSubsetError(f"{path}:{n}: tab indentation")
        lines.append((n, len(line) - len(line.lstrip(" ")), line))
    pos = 0

    def where(n):
        return f"{path}:{n}"

    def skip_blank():
        nonlocal pos
        while pos < len(lines) and not _strip_comment(lines[pos][2]).strip():
            pos += 1

    def literal_block(parent_indent):
        """A '|' block scalar's lines (clip chomping: one final newline)."""
        nonlocal pos
        body, indent = [], None
        while pos < len(lines):
            n, ind, line = lines[pos]
            if line.strip():
                if ind <= parent_indent:
                    break
                if indent is None:
                    indent = ind
                if ind < indent:
                    raise YamlSubsetError(f"{where(n)}: block scalar indentation")
                body.append(line[indent:])
            else:
                body.append("")
            pos += 1
        while body and body[-1] == "":
            body.pop()
        return "\n".join(body) + "\n" if body else ""

    def mapping(indent, first=None):
        """A block mapping at this indent; `first` is the text of its first
        entry when it starts on a list item's line ('- key: value')."""
        nonlocal pos
        result = {}
        start_line = None
        while True:
            if first is not None:
                n, text = first
                first = None
            else:
                skip_blank()
                if pos >= len(lines) or lines[pos][1] != indent or lines[pos][2].lstrip().startswith("- "):
                    if pos < len(lines) and lines[pos][1] > indent:
                        raise YamlSubsetError(f"{where(lines[pos][0])}: unexpected indentation")
                    break
                n, _, line = lines[pos]
                text = _strip_comment(line).strip()
                pos += 1
            if start_line is None:
                start_line = n
            key, rest = _split_key(text, where(n))
            if key in result:
                raise YamlSubsetError(f"{where(n)}: duplicate key {key!r}")
            if rest == "|":
                result[key] = literal_block(indent)
            elif rest == "{}":  # an empty flow mapping (dispatch: {})
                result[key] = {"__line__": n}
            elif rest:
                result[key] = _value(rest, where(n))
            else:  # a nested block: mapping or list, more indented
                skip_blank()
                if pos < len(lines) and lines[pos][1] > indent:
                    child = lines[pos][1]
                    if lines[pos][2].lstrip().startswith("- "):
                        result[key] = sequence(child)
                    else:
                        result[key] = mapping(child)
                elif pos < len(lines) and lines[pos][1] == indent and lines[pos][2].lstrip().startswith("- "):
                    result[key] = sequence(indent)  # a list at the key's own indent
                else:
                    result[key] = None
        result["__line__"] = start_line
        return result

    def sequence(indent):
        nonlocal pos
        items = []
        while True:
            skip_blank()
            if pos >= len(lines) or lines[pos][1] != indent or not lines[pos][2].lstrip().startswith("- "):
                break
            n, _, line = lines[pos]
            text = _strip_comment(line).strip()[2:].strip()
            pos += 1
            if re.match(r"[^:#\[\]{}\"']+?:(\s|$)", text):
                items.append(mapping(indent + 2, first=(n, text)))
            else:
                items.append(_value(text, where(n)))
        return items

    skip_blank()
    top = sequence(0)
    skip_blank()
    if pos != len(lines):
        raise YamlSubsetError(f"{where(lines[pos][0])}: unexpected content {lines[pos][2]!r}")
    return top
