"""PyTriton's API (nvidia-pytriton 0.7), served by Tessera in-process. See docs/pytriton.md."""
