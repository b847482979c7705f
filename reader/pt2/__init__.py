"""Sans-IO PT2 semantics: an archive's index (models, configs, checkpoints) -> TensorInfo, and the
arithmetic of a tensor's bytes. Nothing here reads a source; the layers above hand it bytes.

index.py        root, models, configs -> TensorInfo (payload.py: one config entry -> TensorInfo)
schema.py       config JSON as msgspec Structs
tensorinfo.py   TensorInfo, StorageRef, Geometry: one tensor's layout and where its bytes lie
dtypes.py       dtypes: names, sizes, bytes -> an ndarray of a tensor's dtype
strided.py      a strided view's density, dim order and spans
slicing.py      NumPy basic indexing -> the storage's byte runs -> the slice's bytes
gather.py       a view's row-major output as boxes, each built from the bytes behind it; which views
                declare far more bytes than lie behind them (`amplified`)
index_syntax.py a slice's query text ("0:128,::2"): the one grammar, the parser, the OpenAPI pattern
checkpoint.py   a torch.save data.pkl -> TensorInfo
aoti.py         AOTInductor packages' weights configs
executorch.py   the files under data/executorch/
graph.py        models/<model>.json -> typed nodes, signature, modules, consumers
frozen.py       frozen slots dataclasses built in bulk (the thousands of TensorInfo an open makes)
"""
