"""The gallery picker's coverage marks (app.gallery_coverage): worked out by the real built-in agent, kept on disk
by the problem's hash and target, read back by the picker; the program view's prelude folding and marker wrap."""

from __future__ import annotations

import json

from app import gallery_coverage
from app.gallery_picker import sizes_text
from app.highlight import prelude_lines, to_html, wrap_marker
from app.services import TargetInfo
from kforge_core.gallery import get_problem

FLIP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.flip(x, dims=[1])


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
'''


def test_classify():
    assert gallery_coverage.classify(None, None, "no kernel for cumsum", None) == {
        "status": "none", "text": "no kernel for cumsum"}
    assert gallery_coverage.classify("code", "7 of 11 nodes", None, {"conv2d": 3})["status"] == "partly"
    assert gallery_coverage.classify("code", "1 of 1 nodes", None, {}) == {"status": "covered",
                                                                            "text": "1 of 1 nodes"}


def test_compute_stores_each_answer_once_and_read_returns_it(monkeypatch, tmp_path):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    relu = get_problem("level1/01_relu").source
    assert gallery_coverage.read(relu, "cpu") is None  # not worked out yet
    assert gallery_coverage.compute([relu, FLIP], "cpu") == 2
    covered, none = gallery_coverage.read(relu, "cpu"), gallery_coverage.read(FLIP, "cpu")
    assert covered["status"] == "covered" and "1 of 1 nodes (100%) synthesized" in covered["text"], covered
    assert none["status"] == "none" and "flip" in none["text"], none
    assert gallery_coverage.read(relu, "cuda") is None  # per target
    assert gallery_coverage.compute([relu, FLIP], "cpu") == 0  # kept: not traced again
    # a damaged cache file reads as "not worked out", never as an answer
    path = next((tmp_path / "gallery-coverage").rglob("*.json"))
    path.write_text("{not json")
    assert [gallery_coverage.read(s, "cpu") for s in (relu, FLIP)].count(None) == 1
    path.write_text(json.dumps({"status": "bogus"}))
    assert [gallery_coverage.read(s, "cpu") for s in (relu, FLIP)].count(None) == 1


def _target(name: str, device_type: str, title: str) -> TargetInfo:
    return TargetInfo(name=name, title=title, kernel_language="cpp", device_type=device_type, device_name="d",
                      available=True, reason="", has_profiler=False, accepts_profiler_screenshots=False)


def test_sizes_follow_the_chosen_target():
    source = get_problem("level1/01_relu").source
    cpu = sizes_text(source, _target("cpu", "cpu", "CPU (C++ / OpenMP)"))
    assert cpu.startswith("Sizes on CPU (C++ / OpenMP): its `CPU_SIZES`, ") and "=" in cpu, cpu
    gpu = sizes_text(source, _target("cuda", "cuda", "CUDA"))
    assert gpu.startswith("Sizes on CUDA: the file's own sizes") and "CPU target uses its smaller" in gpu, gpu
    assert sizes_text(source, None) == "Sizes: no target is available here."


def test_kernel_prelude_is_counted_up_to_the_first_kernel_and_its_label():
    source = "#include <cmath>\n\nstatic inline float kf_exp(float x) { return x; }\n\n// relu: elementwise\n" \
             "extern \"C\" void kf_k0(const float* a) {\n}\n"
    assert prelude_lines(source) == 4
    assert source.splitlines()[prelude_lines(source)] == "// relu: elementwise"
    assert prelude_lines("int x;\nint y;\n") == 0  # no kernel recognised: nothing folded
    assert prelude_lines("// relu\n__global__ void k() {}\n") == 0


def test_marker_line_gets_the_wrapping_class_once():
    program = '"""doc"""\n\n# kforge-builtin: {"backend": "cpp-ctypes", "kernels": []}\n\nimport torch\n' \
              '# kforge-builtin: not the marker\n'
    html = wrap_marker(to_html(program, "python"))
    assert html.count("kf-marker") == 1 and html.index("kf-marker") < html.index("import")
