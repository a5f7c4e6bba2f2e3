"""Mutation testing of the modules that carry poold's guarantees; the score goes to docs/.

    scripts/mutation [--max-children N] [--min-score 90] [--report-only] [--retry-survivors]
                     [--only PATTERN] [--sample N [--seed S]]

Runs mutmut (pinned in the `mutation` extra) as `[tool.mutmut]` in pyproject.toml configures it:
each mutant (one small change to one function of a module in `only_mutate`) runs against the
tests of its layer that reach that function (tests/mutation_order.py), fastest first, stopping
at the first failure. Then it writes
docs/mutation.md: per module, how many mutants were killed, survived or reached by no test,
and every survivor's diff. A survivor listed in scripts/mutation-equivalent.toml (the function,
the changed lines, and why no test can tell it from the original) counts as equivalent and
leaves the score's denominator; every other survivor is a test to write.

mutmut keeps its work in ./mutants (ignored by git) and reuses a result while the function it
mutated is unchanged. A full run takes longer than a working session on 2 cores, so the results
also go to docs/mutation-results.json (committed): a fresh clone seeds ./mutants from it and
checks only what is new or changed, and the report names the commits the results came from.
A survivor stays a survivor until it is run again: after writing tests for survivors,
--retry-survivors forgets their results and runs them again, in the same mutmut run as
everything not checked yet (one clean run of the tests, not two). --only 'poold.ledger.*' runs
just the unchecked mutants of one layer (mutmut's clean run then covers the tests that reach
their functions, whatever their layer), so a session can finish a layer rather than sample all.
--sample N runs N of the unchecked mutants (of those --only names) drawn at random (the seed is
printed; --seed gives it back): mutmut runs the cheapest functions first, so a run stopped early
has checked the cheap functions only, while a finished sample says how the rest would score.
Not part of CI. Exit status 1 when the score is under --min-score or some mutants were not
checked (a run stopped early).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = Path(sys.executable).parent / "mutmut"
EQUIVALENT = ROOT / "scripts" / "mutation-equivalent.toml"
REPORT = ROOT / "docs" / "mutation.md"
LOG = ROOT / "mutation-run.log"  # beside mutants/, which mutmut may empty and rebuild
RESULTS = ROOT / "docs" / "mutation-results.json"
# The commit a run started on, kept until the save after it: a run killed before its end (a
# long one often is) is still named by the --report-only that saves its results.
RUN_MARK = Path("mutants") / "run-commit"
DRAW = Path("mutants") / "sample.json"  # the last --sample draw: its seed, names and pool size

# mutmut's exit codes (mutmut/stats.py): the mutant's tests failed (1), pytest broke (3), the
# type check caught it (37); they ran out of time (15x their clean run) or the process died
# (a timeout counts as killed: a mutant that loops forever is caught, but the report shows how
# many, since load on the machine could cause one); it survived (0); no test reached it (33, 5).
KILLED = {1, 3, 37}
TIMEOUT = {24, -24, 36, 152, -9, -11}
# Not 255, though mutmut calls it a timeout: its worker exits -1 (255) when running the tests
# raised (pytest could not find a test it was named, say), which proves nothing about the
# mutant: such a result shows as suspicious and counts against the score.
SURVIVED = {0}
NO_TESTS = {5, 33}
NO_MUTANT = "generate.only__mutmut_0"  # a name no mutant has (generate())


@dataclass(frozen=True)
class Mutant:
    name: str  # e.g. poold.ledger.leases.x_grant__mutmut_12
    module: str  # the source file, e.g. poold/ledger/leases.py
    exit_code: int | None

    @property
    def function(self) -> str:
        return self.name.rsplit("__mutmut_", 1)[0]

    @property
    def status(self) -> str:
        if self.exit_code in KILLED:
            return "killed"
        if self.exit_code in TIMEOUT:
            return "timeout"
        if self.exit_code in SURVIVED:
            return "survived"
        if self.exit_code in NO_TESTS:
            return "no tests"
        return "not checked" if self.exit_code is None else f"suspicious ({self.exit_code})"


def run_mutmut(max_children: int, names: list[str] | None = None) -> float:
    """mutmut run (of every mutant without a result, or of those named), its progress spinner to
    mutation-run.log, the commit it starts on to RUN_MARK; seconds it took."""
    started = time.monotonic()
    (ROOT / RUN_MARK).parent.mkdir(exist_ok=True)
    (ROOT / RUN_MARK).write_text(commit())
    with LOG.open("w") as log:
        result = subprocess.run([str(MUTMUT), "run", "--max-children", str(max_children),
                                 *(names or [])],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = LOG.read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut run failed (exit {result.returncode}); end of {LOG}:\n{tail}")
    return time.monotonic() - started


def generate() -> None:
    """Make mutmut write every mutant and its per-test stats without running one: a `mutmut run`
    of a name that matches nothing does all of that, then stops at its filter (expected)."""
    with LOG.open("w") as log:
        subprocess.run([str(MUTMUT), "run", NO_MUTANT], cwd=ROOT, stdout=log,
                       stderr=subprocess.STDOUT, check=False)
    if "nothing matches" not in LOG.read_text(errors="replace"):
        tail = LOG.read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut could not generate the mutants; end of {LOG}:\n{tail}")


def generated(root: Path = ROOT) -> bool:
    """Whether mutmut wrote its mutated copies of the modules here (seed() writes only results:
    the mutants not checked yet are known only once mutmut generated them)."""
    return any((root / "mutants").rglob("*.py"))


def _matches(name: str, patterns: list[str] | None) -> bool:
    """Whether a mutant's name matches one of the patterns (fnmatch); None matches all."""
    return patterns is None or any(fnmatch.fnmatch(name, p) for p in patterns)


def unchecked(patterns: list[str], root: Path = ROOT) -> list[str]:
    """The mutants not checked yet whose names match one of the patterns."""
    return [m.name for m in mutants(root) if m.exit_code is None and _matches(m.name, patterns)]


def sample(names: list[str], n: int, seed: int) -> list[str]:
    """n of the names drawn at random by the seed (all of them when there are no more)."""
    return random.Random(seed).sample(sorted(names), min(n, len(names)))


def seed(root: Path = ROOT) -> int:
    """Write mutmut's per-module files in root/mutants from the committed results, for each module
    that has none yet (a fresh clone); mutmut keeps those of functions whose hash is unchanged
    and checks the rest. How many modules were seeded."""
    path = root / RESULTS.relative_to(ROOT)
    if not path.exists():
        return 0
    seeded = 0
    for module, saved in json.loads(path.read_text())["modules"].items():
        meta = root / "mutants" / f"{module}.meta"
        if meta.exists():
            continue
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({
            "exit_code_by_key": saved["exit_code_by_key"],
            "hash_by_function_name": saved["hash_by_function_name"],
            "type_check_error_by_key": {},
            "durations_by_key": saved["durations_by_key"],
            "estimated_durations_by_key": {},
        }))
        seeded += 1
    return seeded


def save(root: Path = ROOT, ran: bool = True) -> None:
    """The decided results of root/mutants, with the hashes that keep them valid, to the results
    file; the commits whose runs made them are kept in a list (the commit the last run started
    on joins it, if RUN_MARK says; else `ran`: this checkout's commit; a report alone after no
    run adds none)."""
    path = root / RESULTS.relative_to(ROOT)
    before = json.loads(path.read_text()) if path.exists() else {"commits": []}
    modules = {}
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        decided = {k: v for k, v in sorted(data["exit_code_by_key"].items()) if v is not None}
        modules[str(meta.relative_to(root / "mutants"))[: -len(".meta")]] = {
            "hash_by_function_name": dict(sorted(data["hash_by_function_name"].items())),
            "exit_code_by_key": decided,
            "durations_by_key": {k: round(v, 2) for k, v in sorted(data["durations_by_key"].items())
                                 if k in decided},
        }
    here = commit(root)
    mark = root / RUN_MARK
    if mark.exists():
        run_on: str | None = mark.read_text().strip()
    else:
        run_on = here if ran or not before["commits"] else None
    commits = list(before["commits"])
    if run_on is not None:
        commits = [c for c in commits if c != run_on] + [run_on]
    mark.unlink(missing_ok=True)
    draw = root / DRAW
    sample_ = json.loads(draw.read_text()) if draw.exists() else before.get("sample")
    if sample_ and "first_run" not in sample_:
        # The first save after a draw (its run's end, or --report-only after it was killed)
        # keeps what its own run decided of each drawn mutant, before tests are written for
        # its survivors: mutants killed by tests written for them say nothing of those not
        # drawn. (Which survivors are equivalent is judged when the report is written.)
        status = {m.name: m.status for m in mutants(root)}
        sample_["first_run"] = {n: status.get(n, "gone") for n in sorted(sample_["drawn"])}
        if draw.exists():
            draw.write_text(json.dumps(sample_))
    path.write_text(json.dumps({"mutmut": mutmut_version(), "commits": commits,
                                "modules": modules,
                                **({"sample": sample_} if sample_ else {})}, indent=1) + "\n")


def forget_survivors(root: Path = ROOT, patterns: list[str] | None = None,
                     equivalent: Callable[[Mutant], bool] | None = None) -> list[str]:
    """Drop the survivors' results (of the mutants whose names match `patterns`, or all) from
    root/mutants' per-module files, so that the next mutmut run checks them again with
    everything else undecided. Those `equivalent` says are listed as
    equivalent keep theirs: they are known to survive, and a survivor costs a run of every
    test of its layer. The names of those dropped."""
    dropped: list[str] = []
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        module = str(meta.relative_to(root / "mutants"))[: -len(".meta")]
        survivors = [k for k, v in data["exit_code_by_key"].items()
                     if v in SURVIVED and _matches(k, patterns)
                     and not (equivalent and equivalent(Mutant(k, module, v)))]
        for key in survivors:  # no result: mutmut runs it, and --only's names include it
            data["exit_code_by_key"][key] = None
            data["durations_by_key"].pop(key, None)
        if survivors:
            meta.write_text(json.dumps(data))
        dropped += survivors
    return dropped


def listed_as_equivalent() -> Callable[[Mutant], bool]:
    """Whether a mutant is listed in scripts/mutation-equivalent.toml (read once)."""
    listed = equivalents()
    return lambda mutant: reason_if_equivalent(mutant, change(diff(mutant)), listed) is not None


def carried_from(root: Path = ROOT) -> list[str]:
    path = root / RESULTS.relative_to(ROOT)
    return list(json.loads(path.read_text())["commits"]) if path.exists() else []


def mutants(root: Path = ROOT) -> list[Mutant]:
    found = []
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        module = str(meta.relative_to(root / "mutants"))[: -len(".meta")]
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        found += [Mutant(name, module, code) for name, code in codes.items()]
    return found


def diff(mutant: Mutant) -> str:
    """The mutant against its original function, as `mutmut show` prints it, but in this
    process: one `mutmut show` per survivor starts mutmut and reads every module's results to
    find the mutant (half a minute each, over an hour for 140 survivors); the module is known."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    with contextlib.chdir(ROOT):  # mutmut reads mutants/ from the working directory
        return get_diff_for_mutant(mutant.name, path=mutant.module)


def change(diff_text: str) -> str:
    """The diff's removed and added lines, whitespace-trimmed: what an equivalence entry names."""
    lines = [line for line in diff_text.splitlines()
             if line[:1] in "-+" and not line.startswith(("---", "+++"))]
    return "\n".join(f"{line[0]} {line[1:].strip()}" for line in lines)


def equivalents() -> list[dict[str, str]]:
    if not EQUIVALENT.exists():
        return []
    return list(tomllib.loads(EQUIVALENT.read_text()).get("equivalent", []))


def reason_if_equivalent(mutant: Mutant, its_change: str,
                         listed: list[dict[str, str]]) -> str | None:
    for entry in listed:
        if mutant.function.endswith(entry["function"]) and entry["change"].strip() == its_change:
            return entry["reason"]
    return None


def commit(root: Path = ROOT) -> str:
    """The commit the mutants were made from (and whether the tree had changes besides)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"
    # docs/ is what a run writes (this report, the results): no change to what was mutated
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!docs"], cwd=root, capture_output=True, text=True,
                           check=False).stdout.strip()
    return f"{head}{' with uncommitted changes' if dirty else ''}"


def mutmut_version() -> str:
    from importlib.metadata import version
    return version("mutmut")


def sample_lines(found: list[Mutant], equivalent: set[str], root: Path = ROOT) -> list[str]:
    """What the last --sample draw found (none: no lines): how many of the drawn mutants today's
    tests kill, and, from the draw's own run, the share of killed mutants its pool had at least,
    at 95% confidence (Wilson's lower bound), counting a drawn mutant not checked as a
    survivor."""
    path = root / RESULTS.relative_to(ROOT)
    draw = json.loads(path.read_text()).get("sample") if path.exists() else None
    if not draw:
        return []
    status = {m.name: ("equivalent" if m.name in equivalent else m.status) for m in found}
    counts = Counter(status.get(name, "gone") for name in draw["drawn"])
    killed = counts["killed"] + counts["timeout"]
    lines = ["## A random sample of the mutants not checked", "",
             f"{len(draw['drawn'])} of the {draw['of']} mutants not checked on commit "
             f"{draw['commit']} were drawn at random (`--sample {len(draw['drawn'])} "
             f"--seed {draw['seed']}`) and run: {killed} killed"
             + "".join(f", {counts[k]} {k}" for k in ("survived", "no tests", "not checked",
                                                      "equivalent") if counts[k])
             + (f" ({counts['gone']} no longer exist: their functions changed)"
                if counts["gone"] else "") + "."]
    first = Counter("equivalent" if n in equivalent else st
                    for n, st in draw["first_run"].items())
    first_counted = sum(first.values()) - first["equivalent"] - first["gone"]
    if first_counted:
        first_killed = first["killed"] + first["timeout"]
        low = wilson_lower(first_killed, first_counted)
        lines += ["", f"On the draw's own run, before any test was written for its survivors, "
                  f"{first_killed} of {first_counted} were killed ({first['survived']} "
                  f"survived, {first['equivalent']} equivalent): so, at 95% confidence, at least "
                  f"{100 * low:.1f}% of those {draw['of']} were killed by the tests as they were "
                  "then (Wilson's lower bound; a drawn mutant not checked counts as a "
                  "survivor). The counts above are of today's tests, some written for these "
                  "very mutants: they say nothing more of the mutants not drawn."]
    return [*lines, ""]


def wilson_lower(successes: int, n: int, z: float = 1.96) -> float:
    """The lower end of Wilson's score interval for a proportion of successes out of n."""
    p, z2 = successes / n, z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))  # not a rounding error under 0


def write_report(found: list[Mutant], took_s: float | None, min_score: float) -> float:
    listed = equivalents()
    survivors: list[tuple[Mutant, str, str | None]] = []
    equivalent: list[tuple[Mutant, str, str | None]] = []
    for m in found:
        if m.status == "survived":
            d = diff(m)
            reason = reason_if_equivalent(m, change(d), listed)
            (equivalent if reason else survivors).append((m, d, reason))
    by_module: dict[str, Counter[str]] = {}
    for m in found:
        by_module.setdefault(m.module, Counter())[m.status] += 1
    for m, _d, _r in equivalent:
        by_module[m.module]["survived"] -= 1
        by_module[m.module]["equivalent"] += 1
    total = Counter[str]()
    for counts in by_module.values():
        total.update(counts)

    def score(c: Counter[str]) -> float | None:
        """Of the mutants checked (None: none was): a run stopped early scores what it got to,
        and says so."""
        counted = sum(c.values()) - c["equivalent"] - c["not checked"]
        return 100.0 * (c["killed"] + c["timeout"]) / counted if counted else None

    def shown(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}%"

    rows = [f"| {module} | {sum(c.values())} | {c['killed']} | {c['timeout']} | "
            f"{c['survived']} | {c['no tests']} | {c['equivalent']} | {c['not checked']} | "
            f"{shown(score(c))} |"
            for module, c in sorted(by_module.items())]
    other = sum(v for k, v in total.items()
                if k not in ("killed", "timeout", "survived", "no tests", "equivalent"))
    overall = score(total) or 0.0
    took = f", took {took_s / 60:.0f} min" if took_s is not None else ""
    lines = [
        "# Mutation testing: the core guarantees", "",
        f"Command: `scripts/mutation`. Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC{took}, "
        f"on commit {commit()}, mutmut {mutmut_version()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs. Results from the runs on "
        f"{', '.join(carried_from())} (docs/mutation-results.json): a result stands while the "
        "function it mutated is unchanged, and the tests only grew since.", "",
        "Each mutant is one small change (an operator, a constant, a comparison, a dropped "
        "argument or call) to one function of the modules below, run against the tests of its "
        "layer that reach that function (the ledger's and the allocator's mutants against "
        "tests/ledger and tests/pool, the API's against tests/api, the SDK's against "
        "tests/client, poold.kv's against tests/kv: tests/mutation_order.py), fastest first. "
        "Killed: a test failed. Timeout: the tests ran 15 times longer than on the original "
        "(counted as killed). Survived: every test passed. No tests: "
        "no selected test reaches the function. Equivalent: a survivor that no test can tell "
        "from the original, each listed in `scripts/mutation-equivalent.toml` with its reason. "
        "Score: (killed + timeout) / (all - equivalent - not checked). Log lines are not mutated "
        "(`do_not_mutate_patterns`): what they say is for operators, no guarantee.", "",
        f"**Score: {overall:.1f}%** ({total['killed'] + total['timeout']} killed of "
        f"{sum(total.values()) - total['equivalent'] - total['not checked']}; goal "
        f"{min_score:.0f}%)."
        + (f" **{other} mutants were not checked** (the run stopped before them) or were "
           "suspicious: the score is of those checked." if other else ""), "",
        "| module | mutants | killed | timeout | survived | no tests | equivalent | not checked "
        "| score |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows, "",
        *sample_lines(found, {m.name for m, _d, _r in equivalent}),
        f"## Survivors ({len(survivors)})", "",
    ]
    if not survivors:
        lines += ["None.", ""]
    for m, d, _r in survivors:
        lines += [f"### `{m.name}`", "", "```diff", d.strip(), "```", ""]
    no_tests = [m for m in found if m.status == "no tests"]
    lines += [f"## Reached by no selected test ({len(no_tests)})", ""]
    lines += [f"- `{m.name}`" for m in no_tests] or ["None."]
    lines += ["", f"## Equivalent ({len(equivalent)})", ""]
    lines += [f"- `{m.name}`: {r}\n  `{change(d).replace(chr(10), ' / ')}`"
              for m, d, r in equivalent] or ["None."]
    REPORT.write_text("\n".join(lines) + "\n")
    return overall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--min-score", type=float, default=90.0)
    parser.add_argument("--report-only", action="store_true",
                        help="write docs/mutation.md from the last run's results")
    parser.add_argument("--retry-survivors", action="store_true",
                        help="run every survivor again, with whatever was not checked yet "
                             "(after tests were written for them)")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="run N unchecked mutants drawn at random (of those --only names)")
    parser.add_argument("--seed", type=int, help="the --sample draw's seed (printed when drawn)")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="run only the unchecked mutants whose names match (fnmatch, e.g. "
                             "'poold.ledger.*'; repeatable): a cheap layer first; with "
                             "--retry-survivors, its survivors too")
    args = parser.parse_args()
    took = None
    forgotten: list[str] = []
    if not args.report_only:
        if seeded := seed():
            print(f"seeded {seeded} modules' results from {RESULTS.relative_to(ROOT)}")
        if (args.retry_survivors or args.only or args.sample) and not generated():
            generate()  # a fresh clone: seeded results, no mutants (nor their diffs) yet
        if args.retry_survivors:
            forgotten = forget_survivors(patterns=args.only, equivalent=listed_as_equivalent())
            print(f"{len(forgotten)} survivors to run again")
        if args.only or args.sample:
            names = unchecked(args.only or ["*"])
            print(f"{len(names)} unchecked mutants match {' '.join(args.only or ['*'])}")
            if args.sample is not None:
                draw_seed = (args.seed if args.seed is not None
                             else random.SystemRandom().randrange(2**32))
                retried = [n for n in names if n in forgotten]  # never left out of a draw
                drawn = sample([n for n in names if n not in forgotten], args.sample, draw_seed)
                print(f"{len(drawn)} of them drawn at random, seed {draw_seed} "
                      f"(--seed {draw_seed} draws them again)")
                record = {"seed": draw_seed, "of": len(names) - len(retried),
                          "commit": commit(), "drawn": drawn}
                (ROOT / DRAW).write_text(json.dumps(record))
                names = retried + drawn
            took = run_mutmut(args.max_children, names) if names else 0.0
        else:
            took = run_mutmut(args.max_children)
    found = mutants()
    if not found:
        sys.exit(f"no mutants: did mutmut run? (see {LOG})")
    save(ran=not args.report_only)
    overall = write_report(found, took, args.min_score)
    not_checked = sum(m.status == "not checked" for m in found)
    print(f"mutation score {overall:.1f}% of those checked (goal {args.min_score:.0f}%), "
          f"{not_checked} not checked: {REPORT}")
    return 0 if overall >= args.min_score and not not_checked else 1


if __name__ == "__main__":
    sys.exit(main())
