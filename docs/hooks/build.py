"""MkDocs hooks (``hooks:`` in mkdocs.yml).

* The generated reference pages (``docs/hooks/reference.py``): commands from the argparse parser,
  scenario keys from the pydantic schema. They exist only in the build, never in the repository.
* MathJax served from the site itself (no CDN: the site must work offline and in the browser
  test): ``tex-svg.js`` of MathJax 3, from the ``django-static-mathjax`` wheel of the ``docs``
  extra, which ships MathJax's own distribution files (nothing of Django is imported).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402  (beside this file)

GENERATED = {
    "reference/commands.md": reference.commands_markdown,
    "reference/scenario-keys.md": reference.scenario_keys_markdown,
}
MATHJAX = "javascripts/mathjax/tex-svg.js"


def on_files(files, config):
    for uri, make in GENERATED.items():
        files.append(File.generated(config, uri, content=make()))
    return files


def mathjax_source() -> Path:
    """MathJax 3's ``tex-svg.js`` in the installed ``django-static-mathjax`` package."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax not found: install the docs extra (pip install -e '.[docs]')")
    path = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5" / "tex-svg.js"
    if not path.is_file():
        raise RuntimeError(f"MathJax's tex-svg.js not found at {path}")
    return path


def on_post_build(config):
    target = Path(config["site_dir"]) / MATHJAX
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mathjax_source(), target)
