"""The README and docs/ stay true: every relative link names a file that exists and every
`#anchor` a heading of its page (by GitHub's rules), every code block says how it is tested,
the topic configs they show load, and the README stays a front door. The checks are shown
failing on broken pages too. The examples that need a landed warehouse run in
integration/test_docs_examples.py."""

from __future__ import annotations

import pytest
import yaml

from kafka_landing.config import load_config
from kafka_landing_tests.docs import (
    ROOT,
    anchors,
    blocks,
    broken_links,
    examples,
    github_slug,
    links,
    pages,
    unmarked_or_badly_marked,
)

PAGES = pages()


def test_the_docs_are_the_readme_and_one_page_per_concern():
    assert [p.relative_to(ROOT).as_posix() for p in PAGES] == [
        "README.md", "docs/benchmark.md", "docs/concepts.md", "docs/configuration.md", "docs/operations.md",
        "docs/testing.md"]


def test_every_relative_link_and_anchor_resolves():
    found = [link for page in PAGES for link in links(page)]
    assert len(found) > 50  # the pages link to each other: a parser that finds none would pass
    assert broken_links(PAGES) == []


@pytest.mark.parametrize("heading, slug", [
    ("Slices: what \"hour H of a topic\" means", "slices-what-hour-h-of-a-topic-means"),
    ("Each topic's history: `first_hour`", "each-topics-history-first_hour"),
    ("Spark: a warm engine", "spark-a-warm-engine"),
    ("What a load costs: nothing", "what-a-load-costs-nothing"),
    ("The local stack, the demo, the tests and the benchmark", "the-local-stack-the-demo-the-tests-and-the-benchmark"),
    ("See [the docs](docs/concepts.md) *now*", "see-the-docs-now"),
    ("Landing  two spaces -- and 2x <= 3x", "landing--two-spaces----and-2x--3x"),
    ("Événements à l'heure", "événements-à-lheure"),
])
def test_anchors_follow_githubs_rules(heading, slug):
    assert github_slug(heading) == slug


def test_a_repeated_heading_gets_a_number_and_headings_in_code_are_not_headings():
    text = "# A\n\n## Setup\n\n```bash\n# Setup\n```\n\n## Setup\n\n### Setup\n\n## Setup-1\n"
    assert anchors(text) == ["a", "setup", "setup-1", "setup-2", "setup-1-1"]


def test_broken_links_and_anchors_are_found(tmp_path):
    """The link check can fail: a missing file, a missing heading in another page or in the page
    itself, an anchor into a file that is no page, and a link out of the checkout are each found;
    paths in code spans and code blocks are not links, and external links are not checked."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Twice\n\n## Twice\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Home\n\n## Here\n\n"
        "[ok](docs/other.md) [ok](docs/other.md#twice-1) [ok](#here) [ok](code.py) [ok](docs/)\n"
        "[gone](docs/missing.md) [no heading](docs/other.md#twice-2) [not here](#nowhere)\n"
        "[not a page](code.py#x) [outside](../elsewhere.md)\n"
        "`[a path](kafka_landing/moved.py)` [web](https://example.com/x.md#y)\n\n"
        "```markdown\n[in code](nothing.md)\n```\n\n"
        "![picture](docs/picture.png)\n")
    assert broken_links([readme, tmp_path / "docs" / "other.md"], root=tmp_path) == [
        "README.md:6: docs/missing.md: no such file or folder",
        "README.md:6: docs/other.md#twice-2: no heading of other.md has this anchor",
        "README.md:6: #nowhere: no heading of README.md has this anchor",
        "README.md:7: code.py#x: an anchor into something that is not a Markdown page",
        "README.md:7: ../elsewhere.md: outside the checkout",
        "README.md:14: docs/picture.png: no such file or folder",
    ]


def test_every_code_block_says_how_it_is_tested():
    checked = [b for page in PAGES for b in blocks(page) if b.language in ("python", "bash", "yaml")]
    assert len(checked) >= 10
    assert unmarked_or_badly_marked(PAGES) == []
    # and the ones that need the stack are run there: tables read, shell commands
    assert len(examples("warehouse")) >= 4 and len(examples("shell")) >= 2


def test_a_block_that_does_not_say_how_it_is_tested_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n"                                          # no comment
        "<!-- doc-test: sometimes -->\n```bash\nls\n```\n\n"                    # unknown kind
        "<!-- doc-test: skip -->\n```yaml\na: 1\n```\n\n"                       # skipped, no reason
        "<!-- doc-test: shell 2026-01-01={first_hour} -->\n```bash\nls\n```\n\n"  # literal not in it
        "<!-- doc-test: skip: needs a cluster -->\n```yaml\na: 1\n```\n\n"
        "<!-- doc-test: shell x={topic} -->\n  ```bash\n  echo x\n  ```\n\n"
        "```\nplain text is no example\n```\n")
    assert unmarked_or_badly_marked([page]) == [
        "page.md:1: a python block without a <!-- doc-test: ... --> comment",
        "page.md:6: unknown doc-test kind 'sometimes' (one of warehouse, shell, topic-config, spark41, skip)",
        "page.md:11: a skipped block must say why",
        "page.md:16: a literal to replace is not in the block",
    ]
    indented = blocks(page)[5]
    assert (indented.kind, indented.code, indented.code_for({"topic": "t_1"})) == ("shell", "echo x\n", "echo t_1\n")


def test_the_topic_configs_the_docs_show_load(tmp_path):
    shown = examples("topic-config")
    assert len(shown) >= 2
    for i, block in enumerate(shown):
        path = tmp_path / f"topics_{i}.yaml"
        path.write_text(block.code)
        config = load_config(path)
        assert sorted(config.topics) == sorted(yaml.safe_load(block.code)["topics"]), block.id


def test_the_readme_opens_with_the_two_commands_and_stays_a_front_door():
    text = (ROOT / "README.md").read_text()
    first = blocks(ROOT / "README.md")[0]
    assert [line.split("#")[0].strip() for line in first.code.splitlines()] == ["make demo", "make test"]
    assert text.index("```bash") < text.index("\n## ")  # before any section
    assert len(text.splitlines()) <= 300
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## What it does", "## A five-minute tour", "## Where to go next", "## Code layout", "## Tests"]
    # the code layout is one delimited section, which changes with the code
    assert text.count("<!-- code-layout: begin") == 1 and text.count("<!-- code-layout: end -->") == 1
    assert text.index("## Code layout") < text.index("<!-- code-layout: begin") < text.index(
        "<!-- code-layout: end -->") < text.index("## Tests")
