"""KForge core: problems, platforms, the sandboxed evaluator, agents, the synthesis loop and the run store.

The core never imports streamlit; the app and the CLI are thin layers over it.
"""

__version__ = "0.1.0"
