"""oscrepro: reproduce and extend five papers on oscillator-based attention."""

__version__ = "0.1.0"
