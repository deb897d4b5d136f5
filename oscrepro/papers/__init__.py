"""Paper packages: what exists for one paper only (table adapters, post hooks, analyses, figures).

Each ``oscrepro/papers/<key>/README.md`` indexes that paper's tables and figures: spec -> code -> test -> result.
The core (every other ``oscrepro`` package) never imports ``oscrepro.papers``.
"""
