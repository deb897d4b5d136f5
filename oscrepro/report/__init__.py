"""The browsable report: ``make report`` (``python -m oscrepro.report``) renders every committed table, figure and
claims report under ``results/`` into static HTML, ``results/index.html`` plus one page per paper and for the
claims, the leaderboard and the other tables (``results/report/``), with the provenance of each table (budget,
commit, device, run records) read from its markdown header. Relative links only: it works offline from ``file://``.

* :mod:`oscrepro.report.collect`: which files are committed results, and which page and anchor each one gets;
* :mod:`oscrepro.report.provenance`: a table's budget, commit, device and date from its header, its run records;
* :mod:`oscrepro.report.html`: markdown to HTML with links rewritten to the pages, figures with their captions;
* :mod:`oscrepro.report.build`: the pages.
"""
