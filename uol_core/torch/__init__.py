"""The PyTorch integration: ODL ops as autograd functions (`bridge.to_torch`, forward and derived
backward kernels) and nn.Modules built on them (`nn`, `nn_mlp`).

`import torch` inside this package is the PyTorch package (absolute imports); this package is
`uol_core.torch`.
"""
