"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages written from the code at every build,
so nothing generated is committed and nothing can go stale.

    reference/cli.md     every `ctsweep` command and option (cli_reference.py)
    reference/params.md  every params.yaml key, its default in the code and its value in the
                         repository's params.yaml (params_reference.py)

MkDocs puts this folder on sys.path while it loads the hook, hence the plain sibling imports;
the folder is left out of the site (mkdocs.yml `exclude_docs`).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from cli_reference import cli_markdown
from params_reference import params_markdown

__all__ = ["GENERATED", "cli_markdown", "on_files", "params_markdown"]

GENERATED = ("reference/cli.md", "reference/params.md")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference pages; a hand-written page of the same name is an error, not
    something to overwrite silently."""
    params_yaml = Path(config.config_file_path).parent / "params.yaml"
    pages = {"reference/cli.md": cli_markdown, "reference/params.md": lambda: params_markdown(params_yaml)}
    for uri in GENERATED:
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"{config.docs_dir}/{uri} exists, but that page is generated at build time "
                              f"(docs/hooks/reference.py): remove the file")
        files.append(File.generated(config, uri, content=pages[uri]()))
    return files
