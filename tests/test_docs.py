"""The user documentation: generated, fresh, short where it must be, and its examples run."""

from __future__ import annotations

import doctest
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_generated_block_is_fresh():
    """Each number and example output in README.md and docs/ is what docs/generate.py writes now
    (python docs/generate.py rewrites them)."""
    assert _generator().stale_blocks() == []


def test_a_stale_block_is_seen():
    gen = _generator()
    text = "a\n<!-- generated: accuracy -->\nold figures\n<!-- end generated -->\n"
    assert gen.render(text, {}) != text
    assert "old figures" not in gen.render(text, {})


def test_the_readme_is_short_and_has_the_two_quick_start_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 25_000
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert quick == ["pip install . && supercluster estimate", "pip install '.[test]' && pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # (CI installs the README's test extra, with the launchers' parsers beside it, and runs its command)
    assert re.search(r"^pip install -q '\.\[test(,[a-z]+)*\]'$", ci, re.M) and re.search(r"^pytest -q$", ci, re.M)


def test_the_readme_python_example_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    test = doctest.DocTestParser().get_doctest(block, {}, "README", "README.md", 0)
    assert len(test.examples) >= 5
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0


def test_every_figure_the_pages_show_is_drawn_by_the_generator():
    gen = _generator()
    shown = set()
    for page in gen.PAGES:
        for path in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page.read_text(encoding="utf-8")):
            full = (page.parent / path).resolve()
            assert full.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
            shown.add(full.name)
    assert len(shown) >= 6
    assert shown <= set(gen.FIGURES), sorted(shown - set(gen.FIGURES))
