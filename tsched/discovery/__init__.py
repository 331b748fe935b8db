"""Live collectors: what a machine (or a Ray cluster of them) says about its GPUs and NICs."""
