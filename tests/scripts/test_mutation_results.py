"""scripts/mutation's committed results: a fresh clone seeds mutmut's per-module files from them
and so checks only what is new, and a seeded file never replaces the results of a run in
progress."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutation.py"


@pytest.fixture
def mutation(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_script", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutation_script", module)
    spec.loader.exec_module(module)
    # mutmut itself is in the `mutation` extra, not the test one
    monkeypatch.setattr(module, "mutmut_version", lambda: "3.8.1")
    return module


def meta(exit_codes: dict[str, int | None]) -> dict[str, object]:
    return {
        "exit_code_by_key": exit_codes,
        "hash_by_function_name": {"x_grant": "abc123", "x_release": "def456"},
        "type_check_error_by_key": {},
        "durations_by_key": {k: 1.234 for k, v in exit_codes.items() if v is not None},
        "estimated_durations_by_key": {k: 9.0 for k in exit_codes},
    }


def test_a_fresh_clone_gets_back_every_decided_result(mutation: ModuleType,
                                                      tmp_path: Path) -> None:
    run, clone = tmp_path / "run", tmp_path / "clone"
    codes = {"poold.ledger.leases.x_grant__mutmut_1": 1,
             "poold.ledger.leases.x_grant__mutmut_2": 0,
             "poold.ledger.leases.x_release__mutmut_1": None}  # not reached before the stop
    (run / "mutants" / "poold" / "ledger").mkdir(parents=True)
    (run / "docs").mkdir()
    (run / "mutants" / "poold" / "ledger" / "leases.py.meta").write_text(json.dumps(meta(codes)))
    mutation.save(run)
    saved = json.loads((run / "docs" / "mutation-results.json").read_text())
    assert saved["commits"] == ["unknown"]  # tmp_path is no git checkout
    assert saved["modules"]["poold/ledger/leases.py"]["exit_code_by_key"] == {
        "poold.ledger.leases.x_grant__mutmut_1": 1, "poold.ledger.leases.x_grant__mutmut_2": 0}

    (clone / "docs").mkdir(parents=True)
    (clone / "docs" / "mutation-results.json").write_text(
        (run / "docs" / "mutation-results.json").read_text())
    assert mutation.seed(clone) == 1
    seeded = json.loads((clone / "mutants" / "poold" / "ledger" / "leases.py.meta").read_text())
    # what mutmut's loader reads, every key it asserts on
    assert set(seeded) == set(meta(codes))
    assert seeded["exit_code_by_key"] == saved["modules"]["poold/ledger/leases.py"][
        "exit_code_by_key"]
    assert seeded["hash_by_function_name"] == {"x_grant": "abc123", "x_release": "def456"}
    assert seeded["durations_by_key"]["poold.ledger.leases.x_grant__mutmut_1"] == 1.23


def test_seeding_leaves_a_checkout_that_has_results_alone(mutation: ModuleType,
                                                          tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "mutation-results.json").write_text(json.dumps({
        "mutmut": "3.8.1", "commits": ["aaaaaaa"],
        "modules": {"poold/ledger/leases.py": {
            "hash_by_function_name": {}, "exit_code_by_key": {"k": 0}, "durations_by_key": {}}}}))
    current = tmp_path / "mutants" / "poold" / "ledger" / "leases.py.meta"
    current.parent.mkdir(parents=True)
    current.write_text(json.dumps(meta({"k": 1})))
    assert mutation.seed(tmp_path) == 0
    assert json.loads(current.read_text())["exit_code_by_key"] == {"k": 1}
    assert mutation.carried_from(tmp_path) == ["aaaaaaa"]


def test_a_report_alone_names_no_new_run(mutation: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "a.py.meta").write_text(json.dumps(meta({"k": 1})))
    (tmp_path / "docs").mkdir()
    results = tmp_path / "docs" / "mutation-results.json"
    results.write_text(json.dumps({"mutmut": "3.8.1", "commits": ["aaaaaaa"], "modules": {}}))
    mutation.save(tmp_path, ran=False)
    assert json.loads(results.read_text())["commits"] == ["aaaaaaa"]
    mutation.save(tmp_path, ran=True)
    assert json.loads(results.read_text())["commits"] == ["aaaaaaa", "unknown"]


def test_a_report_after_a_killed_run_names_the_commit_it_ran_on(mutation: ModuleType,
                                                               tmp_path: Path) -> None:
    """A long run is often stopped before its end: the --report-only that saves its results
    names the commit the run started on (the run left it in RUN_MARK), once."""
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "a.py.meta").write_text(json.dumps(meta({"k": 1})))
    (tmp_path / "docs").mkdir()
    results = tmp_path / "docs" / "mutation-results.json"
    results.write_text(json.dumps({"mutmut": "3.8.1", "commits": ["aaaaaaa"], "modules": {}}))
    (tmp_path / mutation.RUN_MARK).write_text("bbbbbbb")
    mutation.save(tmp_path, ran=False)
    assert json.loads(results.read_text())["commits"] == ["aaaaaaa", "bbbbbbb"]
    assert not (tmp_path / mutation.RUN_MARK).exists()
    mutation.save(tmp_path, ran=False)
    assert json.loads(results.read_text())["commits"] == ["aaaaaaa", "bbbbbbb"]


def test_no_results_file_seeds_nothing(mutation: ModuleType, tmp_path: Path) -> None:
    assert mutation.seed(tmp_path) == 0
    assert not (tmp_path / "mutants").exists()
    assert mutation.carried_from(tmp_path) == []


def test_retrying_survivors_forgets_only_their_results(mutation: ModuleType,
                                                       tmp_path: Path) -> None:
    codes = {"poold.ledger.leases.x_grant__mutmut_1": 1,
             "poold.ledger.leases.x_grant__mutmut_2": 0,
             "poold.ledger.leases.x_release__mutmut_1": None}
    path = tmp_path / "mutants" / "poold" / "ledger" / "leases.py.meta"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(meta(codes)))
    # --only's patterns: another layer's survivor keeps its result
    assert mutation.forget_survivors(tmp_path, patterns=["api.*"]) == []
    assert mutation.forget_survivors(tmp_path, patterns=["poold.ledger.*"]) == [
        "poold.ledger.leases.x_grant__mutmut_2"]
    kept = json.loads(path.read_text())
    # a key without a result is one mutmut runs (and --only names); the killed one's stands
    assert kept["exit_code_by_key"] == {"poold.ledger.leases.x_grant__mutmut_1": 1,
                                        "poold.ledger.leases.x_grant__mutmut_2": None,
                                        "poold.ledger.leases.x_release__mutmut_1": None}
    assert "poold.ledger.leases.x_grant__mutmut_2" not in kept["durations_by_key"]
    assert kept["hash_by_function_name"] == meta(codes)["hash_by_function_name"]
    assert sorted(mutation.unchecked(["poold.ledger.*"], tmp_path)) == [
        "poold.ledger.leases.x_grant__mutmut_2", "poold.ledger.leases.x_release__mutmut_1"]
    assert mutation.forget_survivors(tmp_path) == []  # nothing left to forget


def test_a_survivor_listed_as_equivalent_is_not_run_again(mutation: ModuleType,
                                                          tmp_path: Path) -> None:
    """It is known to survive, and a survivor costs a run of every test of its layer."""
    codes = {"poold.ledger.leases.x_grant__mutmut_1": 0, "poold.ledger.leases.x_grant__mutmut_2": 0}
    path = tmp_path / "mutants" / "poold" / "ledger" / "leases.py.meta"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(meta(codes)))
    asked = []

    def equivalent(mutant: object) -> bool:
        asked.append((mutant.name, mutant.module))  # type: ignore[attr-defined]
        return mutant.name.endswith("_1")  # type: ignore[attr-defined]

    assert mutation.forget_survivors(tmp_path, equivalent=equivalent) == [
        "poold.ledger.leases.x_grant__mutmut_2"]
    assert json.loads(path.read_text())["exit_code_by_key"] == {
        "poold.ledger.leases.x_grant__mutmut_1": 0, "poold.ledger.leases.x_grant__mutmut_2": None}
    assert sorted(asked) == [(name, "poold/ledger/leases.py") for name in sorted(codes)]


def test_only_names_the_unchecked_mutants_of_the_layer_asked_for(mutation: ModuleType,
                                                                  tmp_path: Path) -> None:
    """--only runs a layer's unchecked mutants by name: mutmut reruns every mutant it is given by
    name, so a decided one must never be among them."""
    ledger = {"poold.ledger.leases.x_grant__mutmut_1": 1,
              "poold.ledger.leases.x_grant__mutmut_2": None,
              "poold.ledger.leases.x_release__mutmut_1": 0}
    api = {"api.auth.x_role__mutmut_1": None}
    for module, codes in (("poold/ledger/leases.py", ledger), ("api/auth.py", api)):
        path = tmp_path / "mutants" / f"{module}.meta"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(meta(codes)))
    assert mutation.unchecked(["poold.ledger.*"], tmp_path) == [
        "poold.ledger.leases.x_grant__mutmut_2"]
    assert sorted(mutation.unchecked(["poold.ledger.*", "api.*"], tmp_path)) == [
        "api.auth.x_role__mutmut_1", "poold.ledger.leases.x_grant__mutmut_2"]
    assert mutation.unchecked(["poold.kv.*"], tmp_path) == []


def test_seeded_results_are_not_taken_for_generated_mutants(mutation: ModuleType,
                                                           tmp_path: Path) -> None:
    """A fresh clone's seeded results name only decided mutants: --only must have mutmut
    generate the rest first, even when forgotten survivors already look unchecked."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "mutation-results.json").write_text(json.dumps({
        "mutmut": "3.8.1", "commits": ["aaaaaaa"], "modules": {"poold/ledger/leases.py": {
            "hash_by_function_name": {"x_grant": "abc123"},
            "exit_code_by_key": {"poold.ledger.leases.x_grant__mutmut_1": 0},
            "durations_by_key": {}}}}))
    mutation.seed(tmp_path)
    mutation.forget_survivors(tmp_path)
    assert not mutation.generated(tmp_path)
    (tmp_path / "mutants" / "poold" / "ledger" / "leases.py").write_text("# mutated copy\n")
    assert mutation.generated(tmp_path)


def test_a_sample_is_drawn_again_by_its_seed(mutation: ModuleType) -> None:
    """--sample's draw: n of the names, the same n for the same seed whatever order the names
    came in, another draw for another seed, and all of them when n passes their number."""
    names = [f"poold.ledger.leases.x_grant__mutmut_{i}" for i in range(1, 101)]
    drawn = mutation.sample(names, 10, seed=7)
    assert len(set(drawn)) == 10 and set(drawn) <= set(names)
    assert mutation.sample(list(reversed(names)), 10, seed=7) == drawn
    assert mutation.sample(names, 10, seed=8) != drawn
    assert sorted(mutation.sample(names, 500, seed=7)) == sorted(names)


def drawn_from(root: Path, codes: dict[str, int | None], seed: int, of: int) -> Path:
    """A checkout whose last --sample draw is `codes`' mutants (with those results), drawn
    from `of` unchecked ones on commit abc1234; the mutants' per-module file."""
    path = root / "mutants" / "poold" / "ledger" / "leases.py.meta"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(meta(codes)))
    (root / "mutants" / "sample.json").write_text(json.dumps(
        {"seed": seed, "of": of, "commit": "abc1234", "drawn": sorted(codes)}))
    (root / "docs").mkdir()
    return path


def test_a_finished_sample_bounds_what_the_rest_would_score(mutation: ModuleType,
                                                            tmp_path: Path) -> None:
    """The report says how many drawn mutants were killed and, from that, the share of the
    draw's pool that is killed at least (95%); a drawn mutant not run counts against it, a
    drawn one listed as equivalent leaves the count, and the draw outlives a fresh clone."""
    drawn = {f"poold.ledger.leases.x_grant__mutmut_{i}": 1 for i in range(1, 99)}
    drawn["poold.ledger.leases.x_grant__mutmut_99"] = 0  # survived
    drawn["poold.ledger.leases.x_grant__mutmut_100"] = None  # not run yet
    drawn["poold.ledger.leases.x_grant__mutmut_101"] = 0  # listed as equivalent
    drawn_from(tmp_path, drawn, seed=5, of=1000)
    mutation.save(tmp_path)
    (tmp_path / "mutants" / "sample.json").unlink()  # a fresh clone has only the results file
    found = mutation.mutants(tmp_path)
    lines = "\n".join(mutation.sample_lines(
        found, {"poold.ledger.leases.x_grant__mutmut_101"}, tmp_path))
    assert ("101 of the 1000 mutants not checked on commit abc1234 were drawn at random "
            "(`--sample 101 --seed 5`) and run: 98 killed, 1 survived, 1 not checked, "
            "1 equivalent.") in lines
    assert f"at least {100 * mutation.wilson_lower(98, 100):.1f}% of those 1000" in lines
    assert 0.92 < mutation.wilson_lower(98, 100) < 0.94  # Wilson: 98/100 -> [0.930, 0.994]
    assert mutation.wilson_lower(0, 10) == 0.0


def test_no_draw_no_sample_paragraph(mutation: ModuleType, tmp_path: Path) -> None:
    assert mutation.sample_lines([], set(), tmp_path) == []


def test_a_sample_is_judged_by_its_first_run(mutation: ModuleType, tmp_path: Path) -> None:
    """Once tests are written for the draw's survivors, the draw is killed by tests made for
    it: the bound on the mutants not drawn comes from what the draw's own run decided."""
    codes = {f"poold.ledger.leases.x_grant__mutmut_{i}": 1 for i in range(1, 21)}
    codes["poold.ledger.leases.x_grant__mutmut_20"] = 0
    path = drawn_from(tmp_path, codes, seed=1, of=500)
    mutation.save(tmp_path)  # the first save after the draw: its run's end
    first = json.loads((tmp_path / "mutants" / "sample.json").read_text())["first_run"]
    assert first == {name: "killed" if code else "survived" for name, code in codes.items()}
    codes["poold.ledger.leases.x_grant__mutmut_20"] = 1  # a test written for it since
    path.write_text(json.dumps(meta(codes)))
    mutation.save(tmp_path)  # a later run's save keeps the first run as it was
    saved = json.loads((tmp_path / "docs" / "mutation-results.json").read_text())
    assert saved["sample"]["first_run"] == first
    lines = "\n".join(mutation.sample_lines(mutation.mutants(tmp_path), set(), tmp_path))
    assert "and run: 20 killed." in lines
    assert (f"19 of 20 were killed (1 survived, 0 equivalent): so, at 95% confidence, at least "
            f"{100 * mutation.wilson_lower(19, 20):.1f}% of those 500") in lines
    # A survivor of the first run listed as equivalent since leaves the count.
    lines = "\n".join(mutation.sample_lines(mutation.mutants(tmp_path),
                                            {"poold.ledger.leases.x_grant__mutmut_20"}, tmp_path))
    assert "19 of 19 were killed (0 survived, 1 equivalent)" in lines
