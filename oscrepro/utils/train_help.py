"""``python -m oscrepro.train --help`` in a fraction of a second, the groups a user picks first.

Hydra's own ``--help`` needs the train module, so torch and Lightning, imported first (~19 s on the reference
machine), then lists all ~60 config groups alphabetically: the internal ``budget_scale/*`` (chosen by ``budget``)
and ``table/*`` (table specs, read by ``python -m oscrepro.table``) among them, and the composed config after.
This help reads the ``conf/`` tree only (stdlib + OmegaConf, which ``oscrepro`` imports anyway): the groups a run is
made of (:data:`MAIN_GROUPS`) with their options and defaults, then the other groups, then Hydra's own flags,
which keep their Hydra behaviour (``--cfg job`` prints the composed config, ``--hydra-help``, ``--info``, ``-m``).
``oscrepro/train.py`` calls :func:`main` before its heavy imports when ``-h`` or ``--help`` is on the command line.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# What a run is made of, in the order a user thinks of them.
MAIN_GROUPS = ("experiment", "attention", "model", "data", "budget", "trainer", "logger")
# Groups no user picks by hand: what each is for instead.
INTERNAL_GROUPS = {
    "budget_scale": "chosen by budget (conf/budget_scale/README.md)",
    "table": "table specs: python -m oscrepro.table <paper>/<table>",
    "decide": "python -m oscrepro.claims.decide",
    "local": "your machine's own defaults: copy conf/local/default.yaml.example to default.yaml",
}
WIDTH = 100
# Launcher plugin package -> the hydra/launcher configs it registers (hydra-joblib-launcher, hydra-submitit-launcher).
PLUGIN_LAUNCHERS = {
    "hydra_joblib_launcher": ("joblib",),
    "hydra_submitit_launcher": ("submitit_local", "submitit_slurm"),
}


def group_options(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """Every config group under ``conf_dir`` (``model/ffn`` style) with its options (file names without .yaml)."""
    groups: dict[str, list[str]] = {}
    for path in sorted(conf_dir.rglob("*.yaml")):
        rel = path.relative_to(conf_dir)
        if len(rel.parts) > 1:
            groups.setdefault(rel.parent.as_posix(), []).append(rel.stem)
    return groups


def defaults(conf_dir: Path = CONF_DIR) -> dict[str, str | None]:
    """The train config's defaults list as ``{group: option}`` (``optional`` entries under their group name)."""
    out: dict[str, str | None] = {}
    for entry in OmegaConf.to_container(OmegaConf.load(conf_dir / "train.yaml"))["defaults"]:
        if isinstance(entry, dict):
            ((key, value),) = entry.items()
            out[key.removeprefix("optional ").strip()] = value
    return out


def hydra_launchers() -> list[str]:
    """Hydra's launcher configs available here: ``basic`` and those of the installed launcher plugins (found by
    their folder under the ``hydra_plugins`` namespace: importing the plugins would import what they launch)."""
    spec = importlib.util.find_spec("hydra_plugins")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    return ["basic"] + [
        name
        for plugin, names in PLUGIN_LAUNCHERS.items()
        if any((r / plugin).is_dir() for r in roots)
        for name in names
    ]


def _main_options(group: str, groups: dict[str, list[str]]) -> list[str]:
    """A main group's options; ``experiment`` options are ``<paper>/<name>`` (one folder per paper)."""
    if group == "experiment":
        return [f"{g.split('/', 1)[1]}/{o}" for g, opts in groups.items() if g.startswith("experiment/") for o in opts]
    return list(groups.get(group, []))


def _entry(name: str, text: str, indent: int = 18) -> str:
    body = textwrap.fill(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent)
    return f"  {name:<{indent - 3}} {body.lstrip()}" if len(name) < indent - 3 else f"  {name}\n{body}"


def help_text(conf_dir: Path = CONF_DIR) -> str:
    """The help (module docstring), built from ``conf_dir``."""
    groups, chosen = group_options(conf_dir), defaults(conf_dir)
    lines = [
        "usage: python -m oscrepro.train [group=option ...] [key=value ...] [-m] [--cfg job] [--hydra-help]",
        "",
        "Train one run (or, with -m, a Hydra multirun) and write its record to results/runs/<experiment>/<run-id>/.",
        "",
        "  python -m oscrepro.train experiment=fqo/sva budget=smoke          # one run, seconds",
        "  python -m oscrepro.train -m experiment=fqo/sva seed=0,1,2         # a sweep",
        "  python -m oscrepro.train experiment=fqo/sva attention=fqo --cfg job   # print the config, run nothing",
        "",
        "Groups a run is made of (group=option; * = default):",
    ]
    for group in MAIN_GROUPS:
        options = [f"{o}*" if o == chosen.get(group) else o for o in _main_options(group, groups)]
        lines.append(_entry(group, ", ".join(options) or "(none)"))
    main = {g for g in groups if g in MAIN_GROUPS or g.startswith("experiment/")}
    internal = {g for g in groups if g.split("/", 1)[0] in INTERNAL_GROUPS}
    others = [g for g in groups if g not in main and g not in internal]
    lines += ["", "Other groups:"]
    lines += [_entry(g, ", ".join(f"{o}*" if o == chosen.get(g) else o for o in groups[g])) for g in others]
    lines += [f"  (hydra/launcher also takes Hydra's: {', '.join(hydra_launchers())})", "", "Not picked by hand:"]
    lines += [_entry(f"{g}/*" if g in ("budget_scale", "table") else g, why) for g, why in INTERNAL_GROUPS.items()]
    lines += [
        "",
        "Any key: key=value (model.d_model=64, trainer.max_epochs=3); ++key=value adds a key the config lacks.",
        "Hydra's flags work as in any Hydra app: --cfg job|hydra|all prints the composed config (with your overrides),",
        "--hydra-help Hydra's own options, --info config sources and search path, -m / --multirun sweeps.",
    ]
    return "\n".join(lines)


def main() -> None:
    """Print :func:`help_text` and exit 0."""
    print(help_text())
    raise SystemExit(0)


if __name__ == "__main__":
    main()
