"""etdeploy: take a PyTorch model to a device and prove it computes what PyTorch computes."""

__version__ = "0.1.0"
