"""The docs site's hooks (mkdocs.yml's `hooks:`): README.md is the home page, and links that leave
docs/ still lead somewhere.

The pages are read on GitHub too, where `../README.md#inputs` or `../bench/results.png` work as
written. On the site:

- a line `<!-- include: README.md -->` is replaced by that file (a path from the repository's
  top), its links made relative to the including page: docs/index.md is the README, so the
  README stays the one source of the pitch and the quick start;
- a link to README.md goes to the home page, with its anchor;
- an image from outside docs/ is copied into the site (under `_repository/`);
- a link to any other file of the repository goes to it on the repository's web page (repo_url).

Links inside fenced code blocks are left alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from mkdocs.structure.files import File, Files

HOME = "index.md"
README = "README.md"
COPIES = "_repository"  # where images from outside docs/ land in the site
BRANCH = "main"  # the branch repo_url's links name
INCLUDE = re.compile(r"^<!--\s*include:\s*(?P<path>\S+)\s*-->[ \t]*$", re.M)
# a link's text may wrap onto the next lines of its paragraph (never across a blank line)
LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\]\n]|\n(?![ \t]*\n))*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"\n]*\")?\)"
)
FENCE = re.compile(r"^\s*(```|~~~)")


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _outside_code(text: str) -> list[tuple[bool, str]]:
    """`text` cut into runs of lines, each marked whether it is outside fenced code blocks."""
    runs: list[tuple[bool, list[str]]] = []
    fenced = False
    for line in text.split("\n"):
        fence = bool(FENCE.match(line))
        outside = not fenced and not fence
        if fence:
            fenced = not fenced
        if runs and runs[-1][0] == outside:
            runs[-1][1].append(line)
        else:
            runs.append((outside, [line]))
    return [(outside, "\n".join(lines)) for outside, lines in runs]


def _links(text: str):
    for outside, run in _outside_code(text):
        if outside:
            yield from LINK.finditer(run)


def _target(link: str, base: Path, page_dir: Path, image: bool, config) -> str:
    """Where `link`, written in a file in `base`, leads from a page in `page_dir` of the site."""
    if not link or link.startswith(("#", "/")) or re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I):
        return link
    path, hash_, anchor = link.partition("#")
    root, docs = _root(config), Path(config.docs_dir).resolve()
    full = Path(os.path.normpath(base / path))
    if full == root / README:
        full = docs / HOME
    elif not full.is_relative_to(docs):
        if not full.is_relative_to(root) or not full.exists():
            return link  # left as written: the build says it leads nowhere
        inside = full.relative_to(root).as_posix()
        if image and full.is_file():
            full = docs / COPIES / inside
        elif config.repo_url:
            kind = "tree" if full.is_dir() else "blob"
            return f"{config.repo_url.rstrip('/')}/{kind}/{BRANCH}/{inside}{hash_}{anchor}"
        else:
            return link
    return PurePosixPath(os.path.relpath(full, page_dir)).as_posix() + hash_ + anchor


def rebase(text: str, base: Path, page_dir: Path, config) -> str:
    """`text`'s links, written in a file in `base`, made to work from a page in `page_dir`."""

    def relinked(m: re.Match) -> str:
        target = _target(m["target"], base, page_dir, bool(m["bang"]), config)
        return f"{m['bang']}[{m['text']}]({target}{m['title'] or ''})"

    return "\n".join(LINK.sub(relinked, run) if outside else run for outside, run in _outside_code(text))


def on_files(files: Files, config) -> Files:
    """Copy into the site every image from outside docs/ that a page (or a file it includes) shows."""
    root, docs = _root(config), Path(config.docs_dir).resolve()
    for page in list(files.documentation_pages()):
        page_dir = (docs / page.src_uri).parent
        texts = [(page.content_string, page_dir)]
        texts += [
            ((root / m["path"]).read_text(encoding="utf-8"), (root / m["path"]).parent)
            for m in INCLUDE.finditer(page.content_string)
            if (root / m["path"]).is_file()
        ]
        for text, base in texts:
            for link in _links(text):
                if not link["bang"]:
                    continue
                full = Path(os.path.normpath(base / link["target"].partition("#")[0]))
                if full.is_file() and full.is_relative_to(root) and not full.is_relative_to(docs):
                    uri = f"{COPIES}/{full.relative_to(root).as_posix()}"
                    if files.get_file_from_path(uri) is None:
                        files.append(File.generated(config, uri, abs_src_path=str(full)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs passes each by name)
    docs = Path(config.docs_dir).resolve()
    page_dir = (docs / page.file.src_uri).parent
    root = _root(config)
    markdown = rebase(markdown, page_dir, page_dir, config)

    def include(match: re.Match) -> str:
        path = root / match["path"]
        if not path.is_file():
            raise FileNotFoundError(
                f"{page.file.src_uri}: <!-- include: {match['path']} --> names no file "
                "(give a path from the repository's top)"
            )
        return rebase(path.read_text(encoding="utf-8"), path.parent, page_dir, config)

    return INCLUDE.sub(include, markdown)
