"""Every command and Python snippet that README.md, docs/*.md and examples/**/README.md show, run as printed.

One test per fenced block, named ``FILE:LINE`` (the line of its opening fence), so that a failure names the
block. A ``sh`` (or ``bash``, ``console``) block runs command by command through bash in a fresh temporary
directory, with the ``fedsample`` console script next to this interpreter (and its ``python``) first on
``PATH``: each command must exit with status 0. A ``python`` block is executed in a fresh namespace, with
such a directory as the working directory. Blocks in another language (``text``, ``toml``, ``json``,
``csv``...) are not run, and a block that names no language fails: a command must not hide from this test.

An HTML comment on the lines right above a block's fence directs the test (one directive per comment):

- ``<!-- test: slow -->``: the block takes more than about 20 s; it runs with ``-m slow`` (make test-slow).
- ``<!-- test: skip REASON -->``: not run; the reason is printed (``pytest -ra``).
- ``<!-- test: continue -->``: runs after the page's previous block, in its directory and Python namespace
  (the previous block is run first if it has not been).
- ``<!-- test: file NAME -->`` above a non-runnable block (a config, a CSV): its text is written to ``NAME``
  in the directory of every block of the page before the block runs.
- ``<!-- test: setup`` followed by Python lines and ``-->``: run before the block, in its directory (and,
  for a ``python`` block, its namespace): the inputs that a fragment assumes (``data``, ``sampler``...).

Commands that install or change the machine are not run; they are listed in ``NOT_RUN`` with the reason, and
each block's test prints what it left out. The examples' folders (``examples/``, ``experiments/``,
``benchmarks/``) are linked into each directory, so ``python examples/your_model.py`` runs as printed.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("**/README.md")),
]
SHELL = frozenset({"sh", "bash", "console", "shell"})
RUN = SHELL | {"python"}
# Languages of blocks that are shown, not run. A new one goes here, deliberately.
SHOWN = frozenset({"text", "toml", "json", "csv", "ini", "yaml", "latex", "tex", "markdown", "md"})
LINKED = ("examples", "experiments", "benchmarks")  # what commands name by a path relative to the repository
# Programs that install or change the machine: never run here, whatever the block.
NOT_RUN = {
    "pip": "installs packages",
    "pip3": "installs packages",
    "make": "installs into .venv and runs the project's own targets",
    "apt-get": "installs a system package",
    "apt": "installs a system package",
    "git": "changes a repository",
    "cd": "changes the shell's directory",
    "source": "changes the shell's environment",
}
OPTIONAL = frozenset({"torch", "flwr", "ray", "sklearn", "pyarrow", "matplotlib"})  # brought by extras
COMMAND_TIMEOUT = 1800  # seconds; a slow block's longest command stays well below it

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)[ \t]*(?P<lang>[^\s`{]*)")
EXCERPT = re.compile(r"<!--\s*from\s+(?P<path>\S+)\s*-->")  # docs/your-loop.md: an excerpt of a script
DIRECTIVE = re.compile(r"<!--\s*test:\s*(?P<word>slow|skip|continue|file|setup)\b(?P<rest>.*?)-->", re.DOTALL)


@dataclass
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    slow: bool = False
    skip: str | None = None
    follows: bool = False  # <!-- test: continue -->
    file: str | None = None
    setup: str = ""
    setup_line: int = 0
    index: int = 0  # position among the page's blocks
    previous: Block | None = field(default=None, repr=False)  # the page's previous runnable block
    continued: bool = False  # the page's next runnable block continues this one

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN


def _directives(lines: list[str], fence: int) -> tuple[str, int]:
    """The HTML comments on the lines right above line ``fence`` (0-based), as one string, and its first line."""
    start = fence
    while start > 0:
        above = lines[start - 1].strip()
        if above.endswith("-->"):
            while start > 0 and "<!--" not in lines[start - 1]:
                start -= 1
            start -= 1
        else:
            break
    return "\n".join(lines[start:fence]), start


def parse_page(page: Path) -> list[Block]:
    """The page's fenced blocks, with their directives."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        marker, indent = match["fence"], len(match["indent"])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(marker[0] * len(marker)):
            end += 1
        code = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[i + 1 : end])
        block = Block(page, i + 1, match["lang"].lower(), code + "\n", index=len(blocks))
        comments, first = _directives(lines, i)
        excerpt = EXCERPT.search(comments)
        if excerpt is not None:  # the script runs whole in tests/test_examples.py, which also finds this text in it
            assert (ROOT / excerpt["path"]).is_file(), f"{page}:{i + 1}: no script {excerpt['path']}"
            block.skip = f"an excerpt of {excerpt['path']}, which tests/test_examples.py runs and quotes"
        for directive in DIRECTIVE.finditer(comments):
            word, rest = directive["word"], directive["rest"]
            if word == "slow":
                block.slow = True
            elif word == "skip":
                block.skip = rest.strip() or "marked skip"
            elif word == "continue":
                block.follows = True
            elif word == "file":
                block.file = rest.strip()
            else:
                block.setup = rest.split("\n", 1)[1] if "\n" in rest else ""
                # 1-based line of the setup's first line of code, for tracebacks
                block.setup_line = first + comments.count("\n", 0, directive.start("rest")) + 2
        blocks.append(block)
        i = end + 1
    runnable = [b for b in blocks if b.runs and b.skip is None]
    for before, after in itertools.pairwise(runnable):
        after.previous = before
        before.continued = after.follows
    return blocks


BLOCKS = [block for page in PAGES for block in parse_page(page)]


def _params(blocks: list[Block]) -> list[Any]:
    return [pytest.param(b, id=b.name, marks=[pytest.mark.slow] if b.slow else []) for b in blocks]


# --- running a block ------------------------------------------------------------------------------------


@dataclass
class Workspace:
    """A directory (and a Python namespace) shared by a block and the blocks that continue it."""

    directory: Path
    namespace: dict[str, Any]
    done: set[int] = field(default_factory=set)
    failed: dict[int, str] = field(default_factory=dict)


_WORKSPACES: dict[tuple[Path, int], Workspace] = {}


def _head(block: Block) -> Block:
    """The first block of the chain that ``block`` continues."""
    while block.follows:
        if block.previous is None:
            raise AssertionError(f"{block.name}: 'continue' with no runnable block before it on the page")
        block = block.previous
    return block


def _chain(block: Block) -> list[Block]:
    chain = [block]
    while chain[0].follows:
        assert chain[0].previous is not None
        chain.insert(0, chain[0].previous)
    return chain


def _workspace(block: Block, factory: pytest.TempPathFactory) -> Workspace:
    head = _head(block)
    key = (head.page, head.index)
    if key not in _WORKSPACES:
        directory = factory.mktemp(re.sub(r"\W+", "-", head.name))
        for name in LINKED:
            (directory / name).symlink_to(ROOT / name, target_is_directory=True)
        for shown in parse_page(head.page):
            if shown.file is not None:
                (directory / shown.file).write_text(shown.code, encoding="utf-8")
        _WORKSPACES[key] = Workspace(directory, {"__name__": "__main__"})
    return _WORKSPACES[key]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def shell_commands(code: str) -> list[str]:
    """The block's commands: one per line, a trailing backslash continuing it; comments and blanks dropped."""
    commands: list[str] = []
    pending = ""
    for raw in code.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    assert not pending, f"the block ends with a continued line: {pending!r}"
    return commands


def program(command: str) -> tuple[str, list[str]]:
    """The program a command runs (past ``VAR=value`` assignments and ``nice -n N``) and its arguments."""
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    if words[:1] == ["nice"]:
        words = words[3:] if words[1:2] == ["-n"] else words[1:]
    assert words, f"no program in {command!r}"
    return Path(words[0]).name, words[1:]


def not_run(command: str) -> str | None:
    """Why ``command`` is not run here (NOT_RUN), or None."""
    name, args = program(command)
    if name in NOT_RUN:
        return NOT_RUN[name]
    if name.startswith("python") and args[:2] in (["-m", "venv"], ["-m", "pip"]):
        return "makes a virtual environment or installs packages"
    return None


def _run_shell(block: Block, directory: Path) -> None:
    env = _environment()
    script = Path(sys.executable).parent / "fedsample"
    assert shutil.which("fedsample", path=env["PATH"]) == str(script), "PATH must lead to the console script"
    left_out = []
    for command in shell_commands(block.code):
        reason = not_run(command)
        if reason is not None:
            print(f"{block.name}: not run ({reason}): {command}")
            left_out.append(f"`{command}` ({reason})")
            continue
        print(f"{block.name}: $ {command}")
        # `.venv/bin/X` names this environment's X, wherever the test runs.
        line = re.sub(r"(^|\s)\.venv/bin/", lambda m: m[1] + str(script.parent) + "/", command)
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, (
            f"{block.name}: `{command}` exited with status {done.returncode}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
    if left_out and len(left_out) == len(shell_commands(block.code)):
        pytest.skip(f"{block.name}: every command installs or changes the machine: {'; '.join(left_out)}")


def _exec(code: str, block: Block, namespace: dict[str, Any], first_line: int) -> None:
    """Execute ``code`` so that a traceback names the page and the line the code has there."""
    exec(compile("\n" * (first_line - 1) + code, str(block.page), "exec"), namespace)  # the docs' code, as printed


def _run_block(block: Block, workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace.directory)
    if block.setup:
        scope = workspace.namespace if block.lang == "python" else {"__name__": "__main__"}
        _exec(block.setup, block, scope, block.setup_line)
    if block.lang == "python":
        try:
            _exec(block.code, block, workspace.namespace, block.line + 1)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            pytest.skip(f"{block.name}: needs {exc.name}, which an optional extra brings")
    else:
        _run_shell(block, workspace.directory)


def run_block(block: Block, factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the block, after the blocks it continues (once each per session)."""
    workspace = _workspace(block, factory)
    for step in _chain(block):
        if step.index in workspace.failed:
            raise AssertionError(f"{block.name}: the block it continues, {step.name}, failed")
        if step.index in workspace.done:
            continue
        try:
            _run_block(step, workspace, monkeypatch)
        except pytest.skip.Exception:
            workspace.done.add(step.index)
            raise
        except BaseException as exc:
            workspace.failed[step.index] = repr(exc)
            raise
        workspace.done.add(step.index)
    if not block.continued:  # nothing runs in this namespace again: let its objects go
        workspace.namespace.clear()


# --- the tests -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", _params([b for b in BLOCKS if b.runs]))
def test_block_runs_as_printed(
    block: Block, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.skip is not None:
        pytest.skip(f"{block.name}: {block.skip}")
    run_block(block, tmp_path_factory, monkeypatch)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in BLOCKS])
def test_block_names_a_known_language(block: Block) -> None:
    """A block is run (sh, python) or shown (text, toml...): one without a language could hide a command."""
    assert block.lang in RUN | SHOWN, (
        f"{block.name}: fence the block as ```sh or ```python (run by this test) or as one of {sorted(SHOWN)} "
        f"(shown only); got {block.lang or 'no language'!r}"
    )
    assert not (block.file and block.runs), f"{block.name}: 'file' is for a shown block, not a {block.lang} one"


def test_every_page_is_read() -> None:
    """The pages this test reads are the README, every docs page and every example's README."""
    assert {p.name for p in PAGES} >= {"README.md", "index.md", "install.md", "first-comparison.md"}
    assert sum(b.runs for b in BLOCKS) >= 20


def test_the_command_parser() -> None:
    assert shell_commands("# a comment\nfedsample run \\\n    --seeds 2   # two\n\nfedsample presets\n") == [
        "fedsample run      --seeds 2   # two",
        "fedsample presets",
    ]
    assert program("FOO=1 nice -n 10 fedsample run x") == ("fedsample", ["run", "x"])
    assert not_run(".venv/bin/pip install -e '.[all]'") == NOT_RUN["pip"]
    assert not_run("python3 -m venv .venv") is not None
    assert not_run("fedsample run") is None
    assert not_run("python examples/your_model.py") is None


def test_the_directives(tmp_path: Path) -> None:
    """Each directive of the module docstring, read from the comments right above a fence."""
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- test: file a.toml -->\n```toml\nx = 1\n```\n\n"
        "<!-- test: slow -->\n<!-- test: setup\nimport math\nr = 2\n-->\n```python\nprint(math.pi * r)\n```\n\n"
        "<!-- test: continue -->\n```sh\nfedsample presets\n```\n\n"
        "<!-- test: skip needs a cluster -->\n```sh\nfedsample run --ray auto\n```\n\n"
        "An unrelated comment does not count:\n\n<!-- test: slow -->\n\n```\nplain\n```\n"
    )
    shown, snippet, follower, skipped, plain = parse_page(page)
    assert (shown.lang, shown.file, shown.runs) == ("toml", "a.toml", False)
    assert (snippet.slow, snippet.setup, snippet.setup_line, snippet.line) == (True, "import math\nr = 2\n", 10, 13)
    assert (follower.follows, follower.previous) == (True, snippet)
    assert (skipped.skip, skipped.previous) == ("needs a cluster", None)
    assert (plain.lang, plain.slow) == ("", False)


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent == ROOT or ROOT / "examples" in p.parents])
def test_the_pages_outside_the_docs_site_link_to_files_that_exist(page: Path) -> None:
    """The README and the examples' READMEs are not built by mkdocs (whose strict build checks the links of
    docs/): their relative links and images must name files of the repository."""
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
