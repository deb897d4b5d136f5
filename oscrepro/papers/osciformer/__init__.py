"""osciformer: paper-specific analyses (Tables 10 and 11: learned damping regimes, ``damping``)."""
