"""Re-key run records made before the fsn experiments were merged into one recipe (one-line migration).

    python -m oscrepro.tables.migrate [--results-dir results] [--dry-run]

The fsn experiments ``fsn/enwik8_fsn``, ``fsn/codeparrot_transformer``, ... (one per mechanism x corpus) became
``fsn/charlm`` (30 epochs) and ``fsn/charlm_converged`` (50 epochs) with the mechanism, feed-forward block and
corpus as overrides. The resolved configs are otherwise identical (``tests/unit/conf/test_golden_configs.py``), but
the run id hashes ``experiment_name``, so old records would be orphaned. This moves each record to
``runs/<new experiment>/<new run id>/`` and rewrites ``experiment_name`` in its ``config.yaml``; the training
result does not change. Records whose new location already exists are left in place and reported.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from omegaconf import OmegaConf

from oscrepro.runs.record import run_dir

RENAMED: dict[str, str] = {
    **{f"fsn/{corpus}_{model}": "fsn/charlm" for corpus in ("enwik8", "codeparrot")
       for model in ("fsn", "transformer", "nophase", "mf", "winding", "kuramoto")},
    "fsn/enwik8_fsn_50ep": "fsn/charlm_converged",
    "fsn/enwik8_transformer_50ep": "fsn/charlm_converged",
    "fsn/enwik8_kuramoto": "fsn/charlm_converged",  # the base layer was a 50-epoch experiment
}


def migrate(results_dir: Path, dry_run: bool = False) -> list[tuple[Path, Path | None]]:
    """Move every record of a renamed experiment; returns (old dir, new dir or None if it was kept)."""
    moved: list[tuple[Path, Path | None]] = []
    runs = Path(results_dir) / "runs"
    for old_name, new_name in RENAMED.items():
        for cfg_path in sorted((runs / old_name).glob("*/config.yaml")):
            cfg = OmegaConf.load(cfg_path)
            cfg.experiment_name = new_name
            cfg.paths.runs_dir = str(runs)
            target = run_dir(cfg)
            if target.exists():
                moved.append((cfg_path.parent, None))
                continue
            if not dry_run:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(cfg_path.parent), str(target))
                (target / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
            moved.append((cfg_path.parent, target))
    return moved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.tables.migrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    moved = migrate(args.results_dir, args.dry_run)
    for old, new in moved:
        print(f"{old} -> {new if new else 'kept (target exists)'}")
    print(f"{sum(n is not None for _, n in moved)} record(s) {'would be ' if args.dry_run else ''}moved")


if __name__ == "__main__":
    main()
