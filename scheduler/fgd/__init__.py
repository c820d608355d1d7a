"""The cluster model and the fragmentation arithmetic (FGD) that the live extender and both simulators share.

`model` (nodes and pods as arrays), `state` (what is allocated), `shapes` (the target workload's pod shapes) and
`frag` (fragmentation and the FGD score). Nothing here imports the simulators or the extender.
"""
