"""The Metal compiler's log mapped back to the candidate (platforms/metal/_diagnostics.py): canned compiler logs
(plain and wrapped in an NSError), errors raised by compile_shader, and lines after an embedded torch header. The
real compiler's log needs a Mac and skips elsewhere.
"""
from __future__ import annotations

import pytest
import torch

from kforge_core.errors import CompileError
from kforge_core.eval.harness import context
from kforge_core.platform import Availability
from platforms import metal
from platforms.metal._diagnostics import compile_error_details, expansion_map, extract_log, remap_log, torch_include_dir

HAS_MPS = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


KERNEL = """
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* x, uint i [[thread_position_in_grid]]) {
    x[i] = y[i];
}
"""
CANDIDATE = f'''"""doc"""
import torch
from platforms.metal import compile_metal

SOURCE = r"""{KERNEL}"""
'''
SYNTAX_LOG = ("program_source:5:12: error: use of undeclared identifier 'y'\n    x[i] = y[i];\n           ^\n"
              "program_source:4:40: warning: unused parameter\n")
NSERROR_LOG = ('Failed to create metal library, error: Error Domain=MTLLibraryErrorDomain Code=3 "'
               + SYNTAX_LOG + '" UserInfo={NSLocalizedDescription=' + SYNTAX_LOG + '}')


def test_canned_compiler_log_maps_to_candidate_lines():
    start = CANDIDATE.count("\n", 0, CANDIDATE.index(KERNEL)) + 1
    summary, log = compile_error_details(SYNTAX_LOG, KERNEL, start)
    assert summary == "candidate line 9: error: use of undeclared identifier 'y' — `x[i] = y[i];`"
    assert "candidate line 9 (kernel line 5): error: use of undeclared identifier 'y'" in log
    assert "candidate line 8 (kernel line 4): warning: unused parameter" in log


def test_nserror_wrapped_log_is_unwrapped_once():
    log = extract_log(NSERROR_LOG)
    assert log.count("use of undeclared identifier") == 1
    assert log.startswith("program_source:5:12: error")
    summary, _ = compile_error_details(NSERROR_LOG, KERNEL, None)
    assert summary.startswith("kernel line 5: error: use of undeclared identifier 'y'")


def test_compile_metal_maps_a_syntax_error(monkeypatch):
    def fake_compile(source):
        raise SyntaxError(SYNTAX_LOG)

    monkeypatch.setattr(context, "candidate_text", CANDIDATE)
    monkeypatch.setattr(metal, "_libraries", {})
    monkeypatch.setattr(metal, "_mps_ready", lambda: Availability(True, "fake"))
    monkeypatch.setattr(torch.mps, "compile_shader", fake_compile, raising=False)
    with pytest.raises(CompileError) as info:
        metal.compile_metal(KERNEL)
    assert str(info.value).startswith("Metal compilation failed: candidate line 9: error: use of undeclared")
    assert "candidate line 9 (kernel line 5)" in info.value.log


def test_compile_metal_maps_a_runtime_error(monkeypatch):
    def fake_compile(source):
        raise RuntimeError(NSERROR_LOG)

    monkeypatch.setattr(context, "candidate_text", CANDIDATE)
    monkeypatch.setattr(metal, "_libraries", {})
    monkeypatch.setattr(metal, "_mps_ready", lambda: Availability(True, "fake"))
    monkeypatch.setattr(torch.mps, "compile_shader", fake_compile, raising=False)
    with pytest.raises(CompileError, match="candidate line 9: error: use of undeclared identifier 'y'"):
        metal.compile_metal(KERNEL)


def test_lines_after_an_embedded_torch_header_map_back(tmp_path):
    (tmp_path / "c10" / "metal").mkdir(parents=True)
    (tmp_path / "c10" / "metal" / "a.h").write_text("#pragma once\n#include <c10/metal/b.h>\nint a1;\nint a2;\n")
    (tmp_path / "c10" / "metal" / "b.h").write_text("#pragma once\nint b1;\n")
    src = "#include <c10/metal/a.h>\n#include <c10/metal/b.h>\n#include <metal_stdlib>\nkernel void k() {}\n"
    origins = expansion_map(src, tmp_path)
    # expanded: b1, a1, a2 (from line 1), nothing for line 2 (seen), metal_stdlib (3), kernel (4), trailing ""
    assert [o.line for o in origins][:5] == [1, 1, 1, 3, 4]
    assert origins[0].header == "c10/metal/a.h" and origins[4].header is None
    log = remap_log("program_source:5:1: error: bad\nprogram_source:2:3: error: in header", origins)
    assert log.splitlines()[0] == "program_source:4:1: error: bad"
    assert "program_source:1:3: [in c10/metal/a.h, included here] error: in header" in log


def test_expansion_matches_torch_embedding_for_real_headers():
    include = torch_include_dir()
    if include is None or not (include / "c10" / "metal" / "utils.h").exists():
        pytest.skip("this torch wheel ships no c10/metal headers")
    from torch.utils._cpp_embed_headers import _embed_headers  # what compile_shader runs before compiling

    src = "#include <c10/metal/utils.h>\nusing namespace metal;\nkernel void k(device float* x) {}\nbroken here\n"
    expanded = _embed_headers([ln + "\n" for ln in src.split("\n")], [include], set())
    origins = expansion_map(src, include)
    broken = expanded.split("\n").index("broken here") + 1
    assert origins[broken - 1].line == 4 and origins[broken - 1].header is None
    assert len(origins) == expanded.count("\n") + (0 if expanded.endswith("\n") else 1)


@pytest.mark.skipif(not HAS_MPS, reason=metal.MPS_UNAVAILABLE)
def test_mps_real_compiler_error_is_mapped():
    with pytest.raises(CompileError) as info:
        metal.compile_metal(KERNEL)
    assert "kernel line 5" in str(info.value) and "'y'" in str(info.value)
