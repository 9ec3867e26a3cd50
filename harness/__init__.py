"""Compatibility test-matrix harness for torch.compile across torch, Lightning and CUDA."""
