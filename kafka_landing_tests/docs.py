"""Readers of the README and docs/ pages, for the tests that keep them true: their relative
links and `#anchors` (checked by GitHub's rules for heading anchors), and their code blocks
with the `<!-- doc-test: ... -->` comment that says how each one is tested (docs/testing.md).

Only Markdown links are checked, never paths in code spans or code blocks: a page may name
`kafka_landing/whatever.py` in backticks whatever the code layout is today."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout


def pages(root: Path = ROOT) -> list[Path]:
    """The README and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# --- what is text, what is code -----------------------------------------------------------------

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def _lines_outside_code_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line not inside a fenced code block, fences excluded."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m["fence"]
            continue
        if fence is not None:
            if m and m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence) and not m["info"].strip():
                fence = None
            continue
        out.append((n, line))
    return out


_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _without_code_spans(line: str) -> str:
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


# --- headings and GitHub's anchors -------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
_INLINE_LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[^)\s]*)(?:\s+\"[^\"]*\")?\)")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (as github-slugger does): the text as rendered (code
    spans, emphasis and links reduced to their text), lowercased, every character that is not a
    letter, a digit, `_`, `-` or a space dropped, each space turned into `-`."""
    text = _INLINE_LINK.sub(lambda m: m["text"], heading)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML; backticks and asterisks go with the punctuation
    return "".join(c for c in text.lower() if c.isalnum() or c in "_- ").replace(" ", "-")


def anchors(text: str) -> list[str]:
    """Every heading's anchor in a page, in order; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = []
    for _, line in _lines_outside_code_blocks(text):
        m = _HEADING.match(line)
        if not m:
            continue
        slug = unique = github_slug(m["text"])
        while unique in seen:  # as github-slugger counts: a heading "a-1" of its own takes the number
            seen[slug] += 1
            unique = f"{slug}-{seen[slug]}"
        seen[unique] = 0
        out.append(unique)
    return out


# --- links ----------------------------------------------------------------------------------------

_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(?P<target>\S+)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def links(page: Path, text: str | None = None) -> list[Link]:
    """Every relative link of a page (inline links, images, reference definitions), outside code."""
    text = page.read_text() if text is None else text
    found = []
    for n, line in _lines_outside_code_blocks(text):
        prose = _without_code_spans(line)
        targets = [m["target"] for m in _INLINE_LINK.finditer(prose)]
        if m := _REFERENCE_DEF.match(prose):
            targets.append(m["target"].strip("<>"))
        found += [Link(page, n, t) for t in targets if t and not _EXTERNAL.match(t)]
    return found


def broken_links(files: list[Path], root: Path = ROOT) -> list[str]:
    """`page:line: target: why` for every relative link that names no file or folder, or an
    anchor that is no heading of the page it points at. A link may not leave the checkout."""
    problems = []
    texts: dict[Path, str] = {}

    def text_of(p: Path) -> str:
        if p not in texts:
            texts[p] = p.read_text()
        return texts[p]

    for page in files:
        for link in links(page, text_of(page)):
            path, _, anchor = link.target.partition("#")
            where = f"{page.relative_to(root)}:{link.line}: {link.target}"
            target = (page.parent / path).resolve() if path else page
            if path:
                try:
                    target.relative_to(root.resolve())
                except ValueError:
                    problems.append(f"{where}: outside the checkout")
                    continue
                if not target.exists():
                    problems.append(f"{where}: no such file or folder")
                    continue
            if anchor:
                if target.is_dir() or target.suffix.lower() != ".md":
                    problems.append(f"{where}: an anchor into something that is not a Markdown page")
                elif anchor not in anchors(text_of(target)):
                    problems.append(f"{where}: no heading of {target.name} has this anchor")
    return problems


# --- code blocks and how each is tested -------------------------------------------------------------

_MARK = re.compile(r"^[ \t]*<!--\s*doc-test:\s*(?P<spec>.*?)\s*-->\s*$")
KINDS = ("warehouse", "shell", "topic-config", "spark41", "skip")
CHECKED_LANGUAGES = ("python", "bash", "sh", "shell", "yaml", "yml")


@dataclass
class Block:
    """A fenced code block of a page: its language, its code (the fence's indent removed) and the
    doc-test comment on the line before it, if any."""
    page: Path
    line: int  # the opening fence's
    language: str
    code: str
    kind: str | None = None
    why: str = ""  # a skip's reason
    substitutions: dict[str, str] = field(default_factory=dict)  # literal -> the test's value name

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    def code_for(self, values: dict[str, str]) -> str:
        """The code with each literal the comment names replaced by the test's own value."""
        code = self.code
        for literal, name in self.substitutions.items():
            code = code.replace(literal, values[name])
        return code


def _parse_mark(spec: str) -> tuple[str, str, dict[str, str]]:
    kind, _, rest = spec.partition(" ")
    if kind.startswith("skip"):
        return "skip", spec[len("skip"):].lstrip(" :").strip(), {}
    subs = {}
    for word in rest.split():
        literal, eq, name = word.partition("=")
        if not eq or not (name.startswith("{") and name.endswith("}")):
            raise ValueError(f"{word!r}: write literal={{name}}")
        subs[literal] = name[1:-1]
    return kind, "", subs


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every fenced code block of a page, with its doc-test comment."""
    text = page.read_text() if text is None else text
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, language = m["indent"], m["fence"], m["info"].strip().split(" ")[0].lower()
        j = i + 1
        while j < len(lines):
            c = _FENCE.match(lines[j])
            if c and c["fence"][0] == fence[0] and len(c["fence"]) >= len(fence) and not c["info"].strip():
                break
            j += 1
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:j])
        block = Block(page, i + 1, language, code + "\n")
        if i > 0 and (mark := _MARK.match(lines[i - 1])):
            block.kind, block.why, block.substitutions = _parse_mark(mark["spec"])
        out.append(block)
        i = j + 1
    return out


def unmarked_or_badly_marked(files: list[Path]) -> list[str]:
    """Every python, shell or YAML block that does not say how it is tested (or why it is not),
    or says it in a way the tests do not know."""
    problems = []
    for page in files:
        try:
            found = blocks(page)
        except ValueError as exc:
            problems.append(f"{page.name}: {exc}")
            continue
        for b in found:
            if b.kind is None:
                if b.language in CHECKED_LANGUAGES:
                    problems.append(f"{b.id}: a {b.language} block without a <!-- doc-test: ... --> comment")
            elif b.kind not in KINDS:
                problems.append(f"{b.id}: unknown doc-test kind {b.kind!r} (one of {', '.join(KINDS)})")
            elif b.kind == "skip" and not b.why:
                problems.append(f"{b.id}: a skipped block must say why")
            elif b.kind != "skip" and any(lit not in b.code for lit in b.substitutions):
                problems.append(f"{b.id}: a literal to replace is not in the block")
    return problems


def examples(kind: str, files: list[Path] | None = None) -> list[Block]:
    """The code blocks of the README and docs/ that a test of this kind runs."""
    return [b for page in (files or pages()) for b in blocks(page) if b.kind == kind]
