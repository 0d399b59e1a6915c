"""Lowering a traced description into primitives: `graph.lower(desc)`; operator tables in `operators`,
`pointwise`, `rowops`, `matmul`, `pycall`; duplicate primitives merged by `cse`."""
