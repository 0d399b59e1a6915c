"""Kernel plans: which primitives share a kernel (`grouping`), each kernel as a backend-independent `KernelPlan`
(`planning`, `rowspace`, `cat_pieces`), the whole program as a `ProgramPlan` (`fusion.build_plan`)."""
