"""The app's server settings hold from any working directory: loopback bind, no usage statistics (issue 23: the
config under the repo root applied only when started from there)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_server_settings_do_not_depend_on_the_working_directory(tmp_path):
    # Streamlit's own config loader, as `streamlit run <abs path>/app/main.py` calls it, in a fresh process whose
    # working directory has no .streamlit folder (and a home without one).
    code = textwrap.dedent(f"""
        import streamlit.config as c
        c._main_script_path = {str(REPO / "app" / "main.py")!r}
        c.get_config_options(force_reparse=True)
        print(c.get_option("server.address"), c.get_option("browser.gatherUsageStats"), c.get_option("server.port"))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["127.0.0.1", "False", "8501"]
