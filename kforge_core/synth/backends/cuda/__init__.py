"""The CUDA writer (`writer.CudaBackend`) and its parts: statement `emitter`, device `prelude`, `launch` lines,
register `rowcache`, shared-memory `rowcopy`, GroupNorm `pipeline`, reductions `split` over
several blocks, BatchNorm's statistics `bnstats`."""
