"""The twin's toolchain: each pinned component built from its Go module.

`build` finds the binaries in the cache outside the clone or builds what is missing; the folders beside it hold
one small Go wrapper module per component (a `go.mod` that requires the upstream module at the pinned version).
"""
