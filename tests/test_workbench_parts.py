"""The Workbench's pure parts: where a verdict's errors are marked, and the blank template per target."""

from __future__ import annotations

import ast

from app.services import TargetInfo
from tests.browser.appkit import app_env, use_targets  # noqa: F401 - pytest fixtures
from app.workbench import annotations, blank_template


def target(name="cpu", language="cpp", api=("compile_cpp",)) -> TargetInfo:
    return TargetInfo(name, name.upper(), language, name, name, True, "", True, False,
                      candidate_module=f"platforms.{name}", candidate_api=api)


def test_compiler_errors_are_marked_at_the_programs_own_lines():
    verdict = {"status": "compile_error",
               "reason": "C++ compilation failed: candidate line 11: error: expected ';' before 'out' — `out[i]`",
               "compile_log": "kernel.cpp: In function\ncandidate line 11 (kernel line 7): error: expected ';'\n"
                              "candidate line 14 (kernel line 10): error: 'y' was not declared"}
    found = annotations(verdict)
    assert [(a["row"], a["type"]) for a in found] == [(10, "error"), (13, "error")]  # Ace rows are 0-based
    assert "expected ';'" in found[0]["text"] and "'y' was not declared" in found[1]["text"]


def test_python_errors_and_tracebacks_are_marked_and_nothing_else():
    assert [a["row"] for a in annotations({"status": "compile_error"},
                                          "candidate line 3: Python syntax error: expected ':'")] == [2]
    runtime = {"status": "runtime_error", "reason": "forward raised IndexError",
               "log_tail": 'File "/tmp/x/candidate.py", line 22, in forward\n    out[i]'}
    assert [a["row"] for a in annotations(runtime)] == [21]
    assert annotations({"status": "incorrect", "reason": "max abs error 3.2 at output 0"}) == []
    assert annotations(None) == []


def test_blank_templates_parse_and_import_the_targets_helper():
    cpu = blank_template(target())
    assert "from platforms.cpu import compile_cpp" in cpu and "class ModelNew" in cpu
    triton = blank_template(target("triton", "python", ("triton_available",)))
    assert "@triton.jit" in triton
    bare = blank_template(target("custom", "cpp", ()))
    assert "import" in bare and "self.lib" not in bare
    for text in (cpu, triton, bare):
        ast.parse(text)


def test_an_iteration_opens_in_the_workbench_with_its_problem_and_markers(app_env, use_targets):
    from kforge_core.store import open_store
    from tests.browser.appkit import app, texts
    from tests.browser.scripted import BROKEN, PROBLEM

    with open_store() as s:
        run_id = s.create_run("relu2", PROBLEM, "cpu", agent="manual", kind="manual", author="ada")
        s.start_run(run_id)
        s.start_iteration(run_id, 0, "manual")
        s.finish_iteration(run_id, 0, "compile_error", code=BROKEN,
                           reason="C++ compilation failed: candidate line 11: error: expected ';' before 'out'")
        s.finish_run(run_id, "failed", "no version is correct yet")
    at = app("workbench", run=run_id, iteration="0").run()
    assert not at.exception, at.exception
    assert at.session_state["kf-wb-text"] == BROKEN and at.session_state["kf-wb-run"] == run_id
    assert at.text_area(key="kf-wb-problem").value == PROBLEM
    body = texts(at)
    assert "version #0: marked at line 11" in body and "opened from relu2 #0" in body
    assert at.text_input(key="kf-wb-author").value == "ada"  # its author goes on with it
    assert any("History: 1 version" in e.label for e in at.expander)
    missing = app("workbench", run="nope", iteration="0").run()
    assert not missing.exception and "Could not open run `nope`" in texts(missing)
