"""Score a mutmut run of the reference's core modules, judged by the conformance suite alone.

``nox -s mutation`` runs ``mutmut run`` (configured in ``pyproject.toml``: the core modules
of ``reference_impl`` are mutated; the test command is ``pytest --stm-backend=reference``
with no test path, i.e. the conformance suite and nothing else), then this script::

    python tests/mutation/mutation_report.py [--update docs/coverage.md] [--min-score 90]

Every mutant that the suite did not kill is classified:

- ``message``: it changes only the text of an exception's message or what is logged (the
  spec fixes exception types and behaviour, never wording or logs): every changed line
  lies inside the arguments of a ``raise`` or inside a call on ``logger``;
- ``listed``: ``tests/mutation/equivalents.toml`` names it (the function, and fnmatch
  patterns of the line removed and the line added) with the reason it cannot change
  anything the spec makes observable;
- ``outside``: an ``[[outside]]`` entry of that file names it: it changes behaviour only
  for what the suite never gives a backend (an estimator the reference counts
  incrementally, a state the reference never writes), and names the project test that
  kills it. It counts against the score, like an open survivor;
- otherwise it is an open survivor, listed with its change.

The score is killed / (all - equivalent), equivalent being ``message`` plus ``listed``;
a mutant that made the suite time out counts as killed (the suite did not pass).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stm_conformance.matrix import replace_region

HERE = Path(__file__).resolve().parent
EQUIVALENTS = HERE / "equivalents.toml"
REGION = "stm-mutation"
KILLED = {"killed", "timeout"}


@dataclass
class Mutant:
    name: str
    status: str
    #: ``module.function`` (methods as ``module.Class.method``).
    function: str = ""
    removed: str = ""
    added: str = ""
    verdict: str = ""
    reason: str = ""


def results(cwd: Path) -> list[Mutant]:
    out = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout
    mutants = []
    for line in out.splitlines():
        match = re.match(r"\s*(\S+__mutmut_\d+): (.+)$", line)
        if match:
            mutants.append(Mutant(match[1], match[2].strip()))
    return mutants


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _split(name: str) -> tuple[str, str]:
    """``reference_impl.schema.x_load__mutmut_3`` -> (``reference_impl/schema.py``, def name)."""
    module, _, function = name.rpartition(".")
    return module.replace(".", "/") + ".py", function


def _readable(function: str, module: str) -> str:
    """``xǁBudgetǁclip_summary`` -> ``budget.Budget.clip_summary``; ``x_load`` -> ``load``."""
    short = module.rsplit("/", 1)[-1].removesuffix(".py")
    if function.startswith("xǁ"):
        _, cls, method = function.split("ǁ")
        return f"{short}.{cls}.{method}"
    return f"{short}.{function.removeprefix('x_')}"


def _lines(nodes: list[ast.expr]) -> set[int]:
    lines: set[int] = set()
    for node in nodes:
        lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _message_lines(tree: ast.AST) -> tuple[set[int], set[int]]:
    """Lines of exception messages (arguments of a raised call) and of log calls (a call
    on ``logger``: its arguments, or the whole call)."""
    raised: set[int] = set()
    logged: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            raised |= _lines([*node.exc.args, *(k.value for k in node.exc.keywords)])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "logger"
        ):
            logged |= _lines([node])
    return raised, logged


def _matches(entry: dict[str, str], mutant: Mutant) -> bool:
    return (
        entry["function"] == mutant.function
        and fnmatch.fnmatchcase(mutant.removed, entry["removed"])
        and fnmatch.fnmatchcase(mutant.added, entry.get("added", "*"))
    )


def classify(
    mutants: list[Mutant],
    root: Path,
    equivalents: list[dict[str, str]],
    outside: list[dict[str, str]] | None = None,
) -> None:
    """Fill ``function``, ``removed``, ``added`` and the verdict of every mutant."""
    outside = outside or []
    sources: dict[str, tuple[list[str], dict[str, ast.AST]]] = {}
    for mutant in mutants:
        path, name = _split(mutant.name)
        if path not in sources:
            text = (root / "mutants" / path).read_text(encoding="utf-8")
            tree = ast.parse(text)
            sources[path] = (text.splitlines(), {f.name: f for f in _functions(tree)})
        lines, defs = sources[path]
        base = name.rsplit("__mutmut_", 1)[0]
        mutant.function = _readable(base, path)
        if mutant.status in KILLED:
            mutant.verdict = "killed"
            continue
        original, changed = defs[f"{base}__mutmut_orig"], defs[name]
        old = lines[original.lineno - 1 : original.end_lineno]
        new = lines[changed.lineno - 1 : changed.end_lineno]
        old[0], new[0] = old[0].replace(f"{base}__mutmut_orig", base), new[0].replace(name, base)
        removed = [line for line in old if line not in new]
        added = [line for line in new if line not in old]
        mutant.removed = " / ".join(line.strip() for line in removed)
        mutant.added = " / ".join(line.strip() for line in added)
        offsets = {i + 1 for i, line in enumerate(new) if line not in old}
        local = ast.parse("\n".join(line[_indent(new) :] for line in new))
        raised, logged = _message_lines(local)
        if offsets and offsets <= raised:
            mutant.verdict, mutant.reason = "message", "changes only an exception's message"
            continue
        if offsets and offsets <= logged:
            mutant.verdict, mutant.reason = "message", "changes only what is logged"
            continue
        for entry in equivalents:
            if _matches(entry, mutant):
                mutant.verdict, mutant.reason = "listed", entry["reason"]
                break
        else:
            for entry in outside:
                if _matches(entry, mutant):
                    mutant.verdict = "outside"
                    mutant.reason = f"{entry['reason']} (killed by `{entry['killed_by']}`)"
                    break
            else:
                mutant.verdict = "open"


def _indent(lines: list[str]) -> int:
    return len(lines[0]) - len(lines[0].lstrip())


def score(mutants: list[Mutant]) -> tuple[int, int, float]:
    killed = sum(m.verdict == "killed" for m in mutants)
    equivalent = sum(m.verdict in ("message", "listed") for m in mutants)
    counted = len(mutants) - equivalent
    return killed, counted, 100.0 * killed / counted if counted else 100.0


def render(mutants: list[Mutant], wall_s: float | None) -> str:
    killed, counted, percent = score(mutants)
    verdicts = Counter(m.verdict for m in mutants)
    lines = [
        f"**Mutation score: {percent:.1f}%** — {killed} of {counted} non-equivalent mutants "
        f"killed ({len(mutants)} mutants of the core modules; {verdicts['message']} change "
        f"only a message or a log call, {verdicts['listed']} are equivalent for the reasons "
        f"below{'' if wall_s is None else f'; the run took {wall_s / 60:.0f} min'}).",
        "",
    ]
    by_function = Counter(m.function for m in mutants)
    open_ = [m for m in mutants if m.verdict == "open"]
    lines += [
        "| module | mutants | killed | message or log only | equivalent | outside the suite "
        "| open |"
    ]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    modules = sorted({f.split(".")[0] for f in by_function})
    for module in modules:
        of = [m for m in mutants if m.function.split(".")[0] == module]
        counts = Counter(m.verdict for m in of)
        lines.append(
            f"| {module} | {len(of)} | {counts['killed']} | {counts['message']} | "
            f"{counts['listed']} | {counts['outside']} | {counts['open']} |"
        )
    listed = [m for m in mutants if m.verdict == "listed"]
    if listed:
        lines += ["", "Equivalent mutants:", "", "| function | change | why equivalent |"]
        lines.append("| --- | --- | --- |")
        for m in listed:
            lines.append(f"| `{m.function}` | {_change(m)} | {m.reason} |")
    outside = [m for m in mutants if m.verdict == "outside"]
    if outside:
        lines += [
            "",
            f"Survivors outside the suite's reach ({len(outside)}): they change behaviour only "
            "for what the suite never gives a backend; the project's tests kill them.",
            "",
            "| function | change | why out of reach |",
            "| --- | --- | --- |",
        ]
        for m in outside:
            lines.append(f"| `{m.function}` | {_change(m)} | {m.reason} |")
    if open_:
        lines += ["", f"Open survivors ({len(open_)}): the suite does not see these changes.", ""]
        lines += ["| function | change | status |", "| --- | --- | --- |"]
        for m in open_:
            lines.append(f"| `{m.function}` | {_change(m)} | {m.status} |")
    return "\n".join(lines)


def _change(m: Mutant) -> str:
    def code(text: str) -> str:
        return "`" + text.replace("|", "\\|").replace("`", "'") + "`" if text else "(nothing)"

    return f"{code(m.removed)} → {code(m.added)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="where mutmut ran")
    parser.add_argument("--update", type=Path, help="Markdown file whose region to rewrite")
    parser.add_argument("--json", type=Path, help="write every mutant's verdict here")
    parser.add_argument("--wall-s", type=float, help="wall time of the run, to report")
    parser.add_argument("--min-score", type=float, default=90.0)
    args = parser.parse_args(argv)
    listed = tomllib.loads(EQUIVALENTS.read_text(encoding="utf-8"))
    mutants = results(args.root)
    classify(mutants, args.root, listed.get("equivalent", []), listed.get("outside", []))
    region = render(mutants, args.wall_s)
    killed, counted, percent = score(mutants)
    print(f"mutation score {percent:.1f}% ({killed}/{counted}; {len(mutants)} mutants)")
    if args.json:
        args.json.write_text(
            json.dumps([m.__dict__ for m in mutants], indent=1, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
    if args.update:
        text = args.update.read_text(encoding="utf-8")
        try:
            text = replace_region(text, REGION, region + "\n")
        except ValueError as exc:
            print(f"{args.update}: {exc}", file=sys.stderr)
            return 2
        args.update.write_text(text, encoding="utf-8")
    return 0 if percent >= args.min_score else 1


if __name__ == "__main__":
    raise SystemExit(main())
