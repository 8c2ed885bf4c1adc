"""The network and every way it is run and trained.

`model` (the torch model: trunk, attention, heads, logits only) and `cuda_graphs` (its batched
GPU evaluator); `numpy_net` (the forward pass in numpy from an exported file, the reference) and
`native` (the compiled CPU evaluator over the native core); `production` (the prepared,
reloadable model the inference server and network players run); `backends` (the one list of
backends and the chooser among them); `learner` (samples, losses, the training step),
`checkpoint` (models and checkpoints on disk) and `growth` (a trained net made bigger, computing
the same function). Importing the package imports none of them:
`numpy_net`, `native` and `backends` never load torch.
"""
