"""The even/odd service: running sums per parity and running counts per key of ``numbers``."""
