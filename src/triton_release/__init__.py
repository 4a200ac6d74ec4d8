"""triton-release: release NVIDIA Triton Inference Server Python-backend models."""

__version__ = "0.1.0"
