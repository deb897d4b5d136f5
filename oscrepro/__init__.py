"""oscrepro: reproduce and extend five papers on oscillator-based attention."""

__version__ = "0.1.0"

from oscrepro.utils import resolvers as _resolvers  # noqa: E402,F401  (config resolvers, e.g. ${imul:...})
