"""KForge's Streamlit app: `app/main.py` is the router, the page scripts live in the top-level `pages/` folder, and
the components they share live here. The app only reads the run store and starts worker processes; it never runs
agent or candidate code itself (see docs/ARCHITECTURE.md)."""
