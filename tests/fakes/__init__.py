"""Test doubles that speak real protocols (a real HTTP server, not mocks), shared by the test modules."""
