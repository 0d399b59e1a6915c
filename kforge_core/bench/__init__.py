"""`bench`: run an agent over a suite of problems and report correctness, fast_p and geometric-mean speedups."""
