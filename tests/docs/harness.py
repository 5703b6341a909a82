"""Runs the documentation's code examples and checks what they print.

Every fenced block of a page under ``docs/`` is one of:

* ```` ```console ````: shell commands, each a line starting with ``$ `` (a trailing ``\\`` continues it),
  followed by the lines it prints (stdout and stderr together, as a terminal shows them; progress bars
  are off because the output is not a terminal). ``python`` at the start of a command is the test
  suite's interpreter. The command must exit 0, unless what it prints is a ``dpmarket: error:`` line
  (exit status 2) or ``dpmarket: interrupted`` (130/143).
* ```` ```pycon ````: a Python session (``>>>`` and ``...`` prompts), run with :mod:`doctest`
  (whitespace and wall-clock times normalised, no ellipsis); all sessions of a page share one namespace.
* a block with ``title="NAME"`` (```` ```toml title="first.toml" ````): a file the reader writes;
  the harness writes it, then later blocks use it.
* ```` ```text ````: output or a message shown without its command (nothing to run).
* ```` ```sh ````: a long study (minutes to hours) whose figures the page quotes; not run, but each
  command is parsed by dpmarket's own argument parser and its scenario, ``--set`` and every
  ``--grid`` value are validated (:func:`check_study`); a benchmark script's command must name an
  existing script and options it defines.
* ```` ```toml ```` without a title: an excerpt of a scenario file; it must parse as TOML.

Each page runs in a fresh working directory holding a link ``scenarios`` to the repository's
scenario files, blocks in page order, with the forecast cache where a reader has it
(``outputs/forecasts/`` in that directory).

Tolerance: before comparing, both the expected and the printed text have every wall-clock figure replaced
by ``<wall>`` (:data:`~dpmarket.system.reproducibility.WALL_CLOCK`: ``1.07 s wall``, ``"wall_seconds":
1.07``, ``in 3.2 s``). Then each line is compared under the reproducibility contract
(:func:`helpers.reproduces`' rule, :func:`dpmarket.system.reproducibility.line_difference`): the words and
integers exactly, every other figure within the contract's tolerance or one unit of the last digit it is
printed with — the page was measured on one machine and is checked on every other. A line that is only
``...`` in expected console output stands for any number of printed lines (an elision the page shows as
such); nothing else is approximate.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dpmarket.system.reproducibility import differences, line_difference, without_wall_clock

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```\s*$", re.S | re.M)
TITLE = re.compile(r'title="([^"]+)"')

@dataclass
class Block:
    """A fenced block: its language, title (a file name), text, and the line it starts on."""

    lang: str
    title: str | None
    body: str
    line: int


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        lang = info.split()[0] if info else ""
        title = TITLE.search(info)
        indent = len(m.group("indent"))
        body = "\n".join(line[indent:] for line in m.group("body").splitlines())
        out.append(Block(lang, title.group(1) if title else None, body, text[: m.start()].count("\n") + 1))
    return out


def pages() -> list[Path]:
    """The hand-written pages (the generated reference pages have no examples)."""
    skip = {"hooks", "scripts"}
    return sorted(p for p in DOCS.rglob("*.md") if not skip & set(p.relative_to(DOCS).parts))


def normalise(text: str) -> str:
    text = without_wall_clock(text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def matches(expected: list[str], actual: list[str], exact: bool = False) -> bool:
    """Line by line under the reproducibility contract (``exact``: character for character, as
    ``docs/scripts/measure.py write`` compares before it rewrites); an expected line ``...`` matches any
    run of printed lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[i:], exact) for i in range(len(actual) + 1))
    same = expected[0] == actual[0] if exact and actual else bool(actual) and (
        line_difference(expected[0], actual[0]) is None)
    return same and matches(expected[1:], actual[1:], exact)


def console_commands(body: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(line)
        else:
            raise AssertionError(f"console block starts with output, not a '$ ' command: {line!r}")
        i += 1
    return [(c, "\n".join(out)) for c, out in pairs]


def run_console(block: Block, cwd: Path, page: Path) -> None:
    for command, expected in console_commands(block.body):
        shell = re.sub(r"(^|[;&|]\s*)python\b", lambda m: m.group(1) + shlex.quote(sys.executable), command)
        env = {**os.environ, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
        done = subprocess.run(["bash", "-c", shell], cwd=cwd, capture_output=True, text=True, env=env,
                              timeout=300)
        printed = done.stdout + done.stderr
        want, got = normalise(expected), normalise(printed)
        where = f"{page.relative_to(ROOT)}:{block.line}: $ {command}"
        if not matches(want.splitlines(), got.splitlines()):
            raise AssertionError(f"{where}\n--- expected\n{want}\n--- printed\n{got}")
        error = want.startswith("dpmarket: error:") or "\ndpmarket: error:" in want
        allowed = {0} | ({2} if error else set()) | ({130, 143} if "dpmarket: interrupted" in want else set())
        if done.returncode not in allowed:
            raise AssertionError(f"{where}\nexit status {done.returncode}\n{printed}")


class ContractChecker(doctest.OutputChecker):
    """doctest's comparison after the wall-clock figures of both sides are normalised; where the text
    differs, line by line under the reproducibility contract (whitespace runs taken as one space)."""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        want, got = normalise(want), normalise(got)
        if super().check_output(want + "\n", got + "\n", optionflags):
            return True
        squeeze = [[" ".join(line.split()) for line in text.splitlines()] for text in (want, got)]
        return not differences("\n".join(squeeze[0]), "\n".join(squeeze[1]))


def run_pycon(block: Block, namespace: dict, page: Path) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(block.body, namespace, f"{page.name}:{block.line}", str(page), block.line)
    runner = doctest.DocTestRunner(checker=ContractChecker(), optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append, clear_globs=False)
    namespace.update(test.globs)  # DocTest copies the namespace: later sessions see this one's names
    if runner.failures:
        raise AssertionError(f"{page.relative_to(ROOT)}:{block.line}\n" + "".join(report))


def check_study(command: str) -> None:
    """A long study's command, checked without running it: the parser accepts it and its scenario
    validates with its ``--set`` overrides and with every ``--grid`` value."""
    from dpmarket.api import load
    from dpmarket.cli import _parser

    words = shlex.split(command)
    if words[0] == ".venv/bin/python":  # a benchmark script: it exists, and takes the options shown
        script = ROOT / words[1]
        assert script.is_file(), f"no such benchmark: {words[1]}"
        assert all(w in script.read_text(encoding="utf-8") for w in words[2:] if w.startswith("--")), command
        return
    assert words[:3] == ["python", "-m", "dpmarket"], command
    args = _parser().parse_args(words[3:])
    overrides = list(getattr(args, "overrides", []) or [])
    scenario = str(ROOT / args.scenario) if (ROOT / args.scenario).exists() else args.scenario
    load(scenario, overrides=overrides)
    for grid in getattr(args, "grid", None) or []:
        from dpmarket.experiment.grid import parse_axis

        axis = parse_axis(grid)
        for text in axis.texts:
            load(scenario, overrides=[*overrides, f"{axis.key}={text}"])


def study_commands(body: str) -> list[str]:
    """The dpmarket commands of an ``sh`` block (comments and continuations handled)."""
    joined = re.sub(r"\\\n\s*", " ", body)
    commands = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith(("python -m dpmarket", ".venv/bin/python benchmarks/")):
            commands.append(line)
    return commands


def run_page(page: Path, workdir: Path) -> int:
    """Runs every block of ``page`` in ``workdir``; returns how many blocks ran or were checked."""
    (workdir / "scenarios").symlink_to(ROOT / "scenarios")
    namespace: dict = {"__name__": "__docs__"}
    count = 0
    cwd = os.getcwd()
    os.chdir(workdir)
    # The forecast cache as a reader has it, outputs/forecasts/ in the working directory (the test
    # suite points $DPMARKET_FORECAST_CACHE elsewhere, which the commands would print).
    cache = os.environ.pop("DPMARKET_FORECAST_CACHE", None)
    try:
        for block in blocks(page):
            if block.title:
                target = workdir / block.title
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.body + "\n", encoding="utf-8")
            elif block.lang == "console":
                run_console(block, workdir, page)
            elif block.lang == "pycon":
                run_pycon(block, namespace, page)
            elif block.lang == "sh":
                commands = study_commands(block.body)
                assert commands, f"{page}:{block.line}: an sh block without a dpmarket command"
                for command in commands:
                    check_study(command)
            elif block.lang == "toml":
                tomllib.loads(block.body)
            elif block.lang == "text":
                continue
            else:
                raise AssertionError(f"{page.relative_to(ROOT)}:{block.line}: block of language "
                                     f"{block.lang!r}: use console, pycon, text, sh, or a title")
            count += 1
    finally:
        os.chdir(cwd)
        if cache is not None:
            os.environ["DPMARKET_FORECAST_CACHE"] = cache
    return count
