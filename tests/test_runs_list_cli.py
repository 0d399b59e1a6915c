"""`python -m kforge_core runs`: each listed run says who wrote its programs — a person's manual run (the Workbench)
by its author, an agents' run by its agent and model."""

from __future__ import annotations

from kforge_core.cli import main
from kforge_core.store import open_store

PROBLEM = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_runs_list_names_the_author_of_a_manual_run(tmp_path, capsys):
    db = tmp_path / "runs.db"
    with open_store(db) as s:
        manual = s.create_run("relu_by_hand", PROBLEM, "cpu", agent="manual", kind="manual", author="ada")
        nameless = s.create_run("relu_nameless", PROBLEM, "cpu", agent="manual", kind="manual")
        agents = s.create_run("relu_llm", PROBLEM, "cpu", agent="llm", model="qwen2.5-coder")
        builtin = s.create_run("relu_builtin", PROBLEM, "cpu", agent="builtin")
    assert main(["runs", "--db", str(db)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "relu_by_hand on cpu (manual, by ada)" in lines[manual]
    assert "(manual, by a person)" in lines[nameless]
    assert "relu_llm on cpu (llm, qwen2.5-coder)" in lines[agents]
    assert "relu_builtin on cpu (builtin)" in lines[builtin]
    assert "manual" not in lines[agents] + lines[builtin]
