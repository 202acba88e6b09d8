"""Reading a YAML file a user wrote (params.yaml, search spaces) strictly and safely.

PyYAML's safe_load already refuses Python tags; on top of it this loader refuses what would
otherwise pass silently or hang:
  - a key given twice in one mapping (PyYAML keeps the last: a second `search:` block would
    silently drop the first),
  - more than MAX_ALIASES aliases, a structure nested deeper than MAX_DEPTH, or one that expands
    to more than MAX_NODES values through aliases ("billion laughs": a few hundred bytes that
    reference each other into 10^9 values, which validating or printing then walks), or a
    recursive alias,
  - a file over MAX_BYTES, or one that is not UTF-8 text (binary, UTF-16).
Every failure is a ConfigError of one line: the file, the line and column where known, and the
problem, never a snippet of the file. libyaml parses when PyYAML has it (about 3x faster: the
fuzz test loads thousands of files); composing is guarded by a first pass over its events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from pipeline.errors import ConfigError
from pipeline.names import shown

MAX_BYTES = 1 << 20     # 1 MiB: params.yaml and a search space are a few kB (load_yaml's max_bytes for more)
MAX_ALIASES = 100
MAX_DEPTH = 64          # nesting of mappings and lists, aliases expanded
MAX_NODES = 200_000     # values after expanding aliases (checked only in a file that has aliases)


def _check_events(events: Iterator[yaml.Event]) -> int:
    """Refuse nesting deeper than MAX_DEPTH and more than MAX_ALIASES aliases, from the parser's
    events, before any composer recurses into them (libyaml's composer crashes the interpreter
    on a few thousand `[`, PyYAML's raises RecursionError). Returns the number of aliases."""
    depth = aliases = 0
    for event in events:
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _Refused(event.start_mark, f"more than {MAX_ALIASES} aliases (*name)")
    return aliases


class _StrictConstructor(SafeConstructor):
    """SafeConstructor that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # unhashable keys are the constructor's error; `<<` merges may override
            key = self.construct_object(key_node)
            if key in seen:
                raise _Refused(key_node.start_mark, f"key {shown(key)} given twice in one mapping")
            seen.add(key)
        return super().construct_mapping(node, deep)


try:  # libyaml: parsing and composing in C, about 3x faster than PyYAML's own
    from yaml._yaml import CParser as _Parser
except ImportError:  # a PyYAML built without libyaml: its own reader, scanner, parser and composer
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser, Composer):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)


class _StrictLoader(_Parser, _StrictConstructor, Resolver):  # type: ignore[misc, valid-type]
    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _StrictConstructor.__init__(self)
        Resolver.__init__(self)


def _events(text: str) -> Iterator[yaml.Event]:
    parser = _Parser(text)
    try:
        while parser.check_event():
            yield parser.get_event()
    finally:
        parser.dispose()


class _Refused(yaml.MarkedYAMLError):
    def __init__(self, mark: yaml.Mark, problem: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def _expanded_size(node: Node, sizes: dict[int, int], path: set[int], depth: int) -> int:
    """Values under `node` with every alias expanded, memoised per node (so linear in the
    file, however many times an alias is used); a node on its own path is a recursive alias."""
    key = id(node)
    if key in path:
        raise _Refused(node.start_mark, "a recursive alias (a value that contains itself)")
    if key in sizes:
        return sizes[key]
    if depth > MAX_DEPTH:
        raise _Refused(node.start_mark, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded")
    children: list[Node] = []
    if isinstance(node, SequenceNode):
        children = list(node.value)
    elif isinstance(node, MappingNode):
        children = [n for pair in node.value for n in pair]
    path.add(key)
    total = 1 + sum(_expanded_size(child, sizes, path, depth + 1) for child in children)
    path.discard(key)
    if total > MAX_NODES:
        raise _Refused(node.start_mark, f"expands to more than {MAX_NODES} values through aliases")
    sizes[key] = total
    return total


def _text(path: Path, max_bytes: int) -> str:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ConfigError(f"{path}: {size} bytes, larger than the {max_bytes} allowed for this YAML file")
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if b"\x00" in data:
        raise ConfigError(f"{path}: contains NUL bytes (binary, or UTF-16 text); save it as UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded); save it as UTF-8") from None


def _one_line(path: Path, exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = ", ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
    elif isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        what = f"character #x{exc.character:04x} is not allowed in YAML"  # type: ignore[str-format]
        where = f"{path}: position {exc.position}"
    else:
        what, where = type(exc).__name__, str(path)
    what = " ".join(str(what).split())
    return f"{where}: not valid YAML: {what if len(what) <= 160 else what[:157] + '...'}"


def load_yaml(path: Path, max_bytes: int = MAX_BYTES) -> Any:
    """The one document in the YAML file at `path` (None when empty), parsed strictly; any
    problem is a one-line ConfigError naming the file (module docstring). `max_bytes`: a larger
    limit for a machine-written file (dvc.lock grows with every stage)."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    text = _text(path, max_bytes)
    loader = None
    try:
        aliases = _check_events(_events(text))  # the text is parsed twice: cheap, and nothing recurses first
        loader = _StrictLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        if aliases:  # without aliases the values are the file's own, bounded by its size
            _expanded_size(node, {}, set(), 0)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(_one_line(path, exc)) from None
    finally:
        if loader is not None:
            loader.dispose()
