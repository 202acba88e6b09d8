"""The documentation site (mkdocs.yml, docs/): it builds with --strict, a broken link or anchor fails
the build naming the page and the link, the reference pages generated from the code (docs/hooks/)
hold every command and every params.yaml key, and no page loads anything from the network."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import markdown
import pytest
import typer
import yaml
from mkdocs.config import load_config
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from pipeline.cli import app
from pipeline.config import Params

REPO = Path(__file__).resolve().parents[1]
HOOKS = REPO / "docs" / "hooks"


def _mkdocs_build(config_dir: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` as `make docs` runs it, from `config_dir`, into `site_dir`."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's notice about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=config_dir, env=env, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    site = tmp_path_factory.mktemp("site")
    return _mkdocs_build(REPO, site), site


@pytest.fixture(scope="module")
def hooks() -> Iterator[types.ModuleType]:
    """docs/hooks/reference.py, imported as MkDocs imports it (its folder on sys.path)."""
    sys.path.insert(0, str(HOOKS))
    try:
        spec = importlib.util.spec_from_file_location("docs_hooks_reference", HOOKS / "reference.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(HOOKS))


def _rendered(markdown_text: str) -> str:
    """`markdown_text` as HTML, with mkdocs.yml's own Markdown extensions."""
    config = load_config(str(REPO / "mkdocs.yml"))
    return markdown.markdown(markdown_text, extensions=config.markdown_extensions,
                             extension_configs=config.mdx_configs)


class _Tags(HTMLParser):
    """Every start tag of a page: (tag, attributes), plus the text of its <style> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def _tags(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def _ids(html: str, page: str) -> set[str]:
    """The element ids of a page, each of which must be unique (a link can reach only the first)."""
    ids = [attrs["id"] for _, attrs in _tags(html).tags if attrs.get("id")]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"{page}: ids used more than once: {twice}"
    return set(ids)


# --- (a) the site builds ---

def test_site_builds_with_strict(built: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, site = built
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    for page in ("index.html", "reference/cli/index.html", "reference/params/index.html"):
        assert (site / page).is_file(), f"the built site has no {page}"


# --- (b) the command-line reference holds every command ---

def _command_paths(command: Any, path: list[str],
                   parent: typer.Context | None = None) -> Iterator[tuple[list[str], Any]]:
    """Every visible command of the click tree Typer builds, as its word path."""
    ctx = typer.Context(command, info_name=path[-1], parent=parent)
    yield path, command
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if not getattr(sub, "hidden", False):
                yield from _command_paths(sub, path + [name], ctx)


def _sections(markdown_text: str) -> dict[str, str]:
    """A generated page's sections by the id of their heading (`## ... {#id}`)."""
    sections: dict[str, str] = {}
    current = None
    for line in markdown_text.splitlines():
        if line.startswith("#") and line.rstrip().endswith("}") and "{#" in line:
            current = line.rsplit("{#", 1)[1].rstrip("} ")
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def test_cli_reference_has_every_command_and_option(hooks: types.ModuleType) -> None:
    text = hooks.cli_markdown()
    ids, sections = _ids(_rendered(text), "docs/reference/cli.md"), _sections(text)
    paths = list(_command_paths(typer.main.get_command(app), ["ctsweep"]))
    assert len(paths) > 10, "the walk found too few commands"
    for path, command in paths:
        anchor = "-".join(path)
        assert anchor in ids, f"docs/reference/cli.md: command `{' '.join(path)}` has no heading #{anchor}"
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            kind = param.param_type_name  # "argument" or "option"
            names = param.opts + param.secondary_opts if kind == "option" else [param.metavar or param.name]
            for name in names:
                assert f"`{name}`" in sections.get(anchor, ""), (
                    f"docs/reference/cli.md#{anchor}: `{' '.join(path)}` does not list {kind} `{name}`")


def _doc_command_lines() -> Iterator[tuple[str, str]]:
    """(page, line) for every `ctsweep ...` command line in a fenced bash, sh, shell or console
    block of the README and the docs (a `$ ` prompt and a trailing comment dropped; a line of
    output, `ctsweep search: ...`, skipped)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        for block in re.findall(r"^ *```(?:bash|sh|console|shell)\n(.*?)^ *```", page.read_text(), re.S | re.M):
            for line in block.splitlines():
                line = line.strip().removeprefix("$ ")
                if (line.startswith("ctsweep ") or line == "ctsweep") and not line.split()[min(1, len(line.split()) - 1)].endswith(":"):
                    line = re.split(r" (?:&&|\|\||\||;) ", line.split("  #")[0].split(" # ")[0])[0]  # ctsweep's part
                    yield str(page.relative_to(REPO)), line.strip()


def test_every_command_in_the_docs_exists_with_its_options() -> None:
    """A `ctsweep` command line in a code block names a real command, and only options it has
    (the CLI reference is generated from the same Typer app)."""
    commands = {tuple(path[1:]): command for path, command in _command_paths(typer.main.get_command(app), ["ctsweep"])}
    lines = list(_doc_command_lines())
    assert len(lines) > 20, "the walk found too few command lines in the docs"
    for page, line in lines:
        words = line.split()[1:]
        path: tuple[str, ...] = ()
        while words and path + (words[0],) in commands:
            path, words = path + (words[0],), words[1:]
        command = commands[path]
        assert path or not words or words[0].startswith("-"), f"{page}: `{line}`: no command `{words[0]}`"
        known = {o for param in command.params for o in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))}
        known |= {"--help"}
        for word in words:
            option = word.split("=")[0]
            if option.startswith("--"):
                assert option in known, f"{page}: `{line}`: `ctsweep {' '.join(path)}` has no option {option}"


def _doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _yaml_blocks() -> Iterator[tuple[str, str]]:
    for page in _doc_pages():
        for block in re.findall(r"^ *```yaml\n(.*?)^ *```", page.read_text(), re.S | re.M):
            yield str(page.relative_to(REPO)), block


def _merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in fragment.items():
        out[key] = _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def _unknown_keys(fragment: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """The keys of a params.yaml fragment that Params does not have (extra_forbidden), its other
    values left unjudged (a placeholder such as `<what ... prints>` is the docs' business)."""
    from pydantic import ValidationError

    try:
        Params.model_validate(_merged(base, fragment))
    except ValidationError as err:
        return [".".join(map(str, e["loc"])) for e in err.errors() if e["type"] == "extra_forbidden"]
    return []


def test_every_params_key_in_the_docs_exists() -> None:
    """A yaml block of the docs that is a params.yaml fragment (its top-level keys are sections of
    params.yaml) names only keys Params has: merged into the shipped params.yaml, validation
    finds no unknown key. Search-space blocks (reference:, params:) are not fragments."""
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    assert _unknown_keys({"search": {"no_such_key": 1}}, base) == ["search.no_such_key"]  # the check can fail
    fragments = []
    for page, block in _yaml_blocks():
        data = yaml.safe_load(block.replace("...", "null"))
        if isinstance(data, dict) and set(data) <= set(Params.model_fields):
            fragments.append(page)
            assert not _unknown_keys(data, base), f"{page}: params.yaml has no key {_unknown_keys(data, base)}: {block!r}"
    assert len(fragments) >= 6, f"the walk found too few params.yaml fragments in the docs: {fragments}"


# A measured figure: a mean ± spread, or a percentage to two decimals. Shorter figures (0.5 s,
# 1.05x) recur by coincidence (a target, another measurement); these do not.
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+ ± \d+\.\d+|(?<![\w.])\d+\.\d{2} ?%")


def _figures_on_several_pages(pages: dict[str, str]) -> dict[str, list[str]]:
    """figure -> the pages stating it, where more than one does. A page that includes another's
    lines (pymdownx.snippets, `--8<--`) does not state them: its source holds only the marker."""
    where: dict[str, set[str]] = {}
    for page, text in pages.items():
        for figure in _FIGURE.findall(text):
            where.setdefault(figure.replace(" %", "%"), set()).add(page)
    return {figure: sorted(on) for figure, on in where.items() if len(on) > 1}


def test_a_measured_figure_is_stated_on_one_page() -> None:
    """The same figure on two pages goes stale on one: a page that needs another's figures links
    to them or includes them (`--8<-- "README.md:default-table"`)."""
    assert _figures_on_several_pages({"a.md": "97.36 ± 0.64", "b.md": "(97.36 ± 0.64 %)", "c.md": "95.95 %"}) \
        == {"97.36 ± 0.64": ["a.md", "b.md"]}  # the check can fail
    pages = {str(page.relative_to(REPO)): page.read_text() for page in _doc_pages()}
    assert sum(len(_FIGURE.findall(text)) for text in pages.values()) > 50, "the walk found too few figures"
    repeated = _figures_on_several_pages(pages)
    assert not repeated, f"figures stated on more than one page (link or include them instead): {repeated}"


# --- (c) the params.yaml reference holds every key ---

def _models(annotation: Any) -> list[tuple[str, type[BaseModel]]] | None:
    """The models a value may be (with the discriminator's tag when there are several), or None."""
    tag_key = None
    if get_origin(annotation) is Annotated:
        annotation, *meta = get_args(annotation)
        tag_key = next((m.discriminator for m in meta if isinstance(m, FieldInfo) and m.discriminator), None)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if get_origin(annotation) in (Union, types.UnionType) and tag_key:
        return [(get_args(m.model_fields[tag_key].annotation)[0], m) for m in get_args(annotation)]
    return None


def _param_anchors(model: type[BaseModel], prefix: list[str], segment: Any) -> Iterator[str]:
    """The anchor id of every key under `model`: its dotted path, a mapping's keys as the docs'
    placeholder (`segment(field)`), a tagged section's tag after it (`prepare.dataset.xor.n_train`)."""
    for name, info in model.model_fields.items():
        key = prefix + [name]
        yield ".".join(key)
        annotation, args = info.annotation, get_args(info.annotation)
        level: list[str] = []
        if get_origin(annotation) is dict and _models(args[1]):
            annotation, level = args[1], [segment(name)]
        elif get_origin(annotation) is list and _models(args[0]):
            annotation = args[0]
        for tag, member in _models(annotation) or []:
            yield from _param_anchors(member, key + level + ([tag] if tag else []), segment)


def test_params_reference_has_every_key(hooks: types.ModuleType) -> None:
    from params_reference import anchor_segment  # the placeholder names are the docs' choice

    text = hooks.params_markdown(REPO / "params.yaml")
    ids = _ids(_rendered(text), "docs/reference/params.md")
    anchors = list(_param_anchors(Params, [], anchor_segment))
    assert len(anchors) > 80, "the walk found too few params.yaml keys"
    missing = [anchor for anchor in anchors if anchor not in ids]
    assert not missing, f"docs/reference/params.md has no entry for these params.yaml keys (anchors): {missing}"
    # The default in the code and the shipped value side by side: here they differ.
    shipped = yaml.safe_load((REPO / "params.yaml").read_text())["promote"]["max_p_value"]
    row = next(line for line in text.splitlines() if "{#promote.max_p_value}" in line)
    assert f"| `null` | `{shipped}` |" in row, f"docs/reference/params.md#promote.max_p_value: {row}"


# --- (d) a broken link fails the build, naming the page and the link ---

def test_broken_link_and_anchor_fail_the_build(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO / "docs", project / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("mkdocs.yml", "params.yaml", "README.md"):  # README.md: the snippets the pages include
        shutil.copy(REPO / name, project / name)
    (project / "docs" / "links-under-test.md").write_text(
        "# Links\n\n[a missing page](no-such-page.md) and [a missing key](reference/params.md#search.no_such_key)\n")
    result = _mkdocs_build(project, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"mkdocs build --strict passed with broken links:\n{output}"
    for named in ("links-under-test.md", "no-such-page.md", "search.no_such_key"):
        assert named in output, f"the failed build does not name {named}:\n{output}"


# --- (e) nothing from the network ---

_LOADED = {"script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src", "video": "src",
           "embed": "src", "object": "data", "link": "href"}


# a font, image or stylesheet a stylesheet fetches: url(https://...), @import "//..."
_REMOTE_CSS = re.compile(r"""(?:url\(|@import)\s*['"]?\s*(?:https?:)?//""", re.IGNORECASE)


def _remote(url: str) -> bool:
    return url.strip().lower().startswith(("http://", "https://", "//"))


def test_built_pages_load_nothing_from_the_network(built: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, site = built
    pages = sorted(site.rglob("*.html"))
    assert pages, f"no pages were built in {site}"
    found = []
    for page in pages:
        parsed = _tags(page.read_text(errors="replace"))
        where = page.relative_to(site)
        for tag, attrs in parsed.tags:
            # a link rel=canonical (from site_url) names the page, it loads nothing
            if tag in _LOADED and _remote(attrs.get(_LOADED[tag], "")) and attrs.get("rel") not in ("canonical",):
                found.append(f"{where}: <{tag} {_LOADED[tag]}={attrs[_LOADED[tag]]}>")
            # mkdocs-material loads Mermaid from unpkg.com for a diagram, and asks api.github.com
            # for a repository's stars when mkdocs.yml sets repo_url
            if "mermaid" in attrs.get("class", "").split():
                found.append(f"{where}: a Mermaid diagram (mkdocs-material loads Mermaid from unpkg.com)")
            if attrs.get("data-md-component") == "source":
                found.append(f"{where}: repo_url's widget (mkdocs-material asks api.github.com)")
        for style in parsed.styles:
            if match := _REMOTE_CSS.search(style):
                found.append(f"{where}: a <style> that loads {match.group(0)}...")
    for css in site.rglob("*.css"):
        if match := _REMOTE_CSS.search(css.read_text(errors="replace")):
            found.append(f"{css.relative_to(site)}: a stylesheet that loads {match.group(0)}...")
    assert not found, "the site loads from the network:\n" + "\n".join(found)
