"""The bodies a tensor or a bundle of tensors is served as, and what they are read through.

body.py      the Body protocol: `length` and `chunks(start, end)` (what the service answers with)
npy.py       `.npy`: a header, then one tensor's row-major bytes
safetensors.py  a safetensors file of the selected tensors
ptd.py       (sans-IO) an ExecuTorch `.ptd` (FlatTensor) file planned from tensor layouts
selection.py which tensors a bundle holds: the one rule the service and the CLI share
planned.py   PlannedBody: a bundle's tensors that lie in order in the archive read as one range
demux.py     (sans-IO) archive bytes of one range -> each entry's content pieces, CRC-checked
spool.py     bytes a bundle sends twice, read once and kept on local disk between the two
runs.py      a body as memory, verified local file runs (sendfile) and streamed parts
"""
