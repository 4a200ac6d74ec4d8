"""Which models need which: an ensemble needs its steps. One place for both directions.

`needed` (what must be loaded to serve some models) and `users` (what must be re-tested when
some models change) walk the same edges, so loading and re-testing can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2

Needs = Mapping[str, Iterable[str]]  # model -> the models it needs loaded


def ensemble_needs(configs: Mapping[str, model_config_pb2.ModelConfig | None]) -> dict[str, set[str]]:
    """model -> its ensemble steps, from parsed configs (None: no config.pbtxt)."""
    return {
        name: {step.model_name for step in config.ensemble_scheduling.step}
        for name, config in configs.items()
        if config is not None and config.platform == "ensemble"
    }


def needed(names: Iterable[str], needs: Needs) -> set[str]:
    """`names` and everything they need, transitively."""
    found: set[str] = set()
    frontier = list(names)
    while frontier:
        name = frontier.pop()
        if name not in found:
            found.add(name)
            frontier.extend(needs.get(name, ()))
    return found


def users(names: Iterable[str], needs: Needs) -> set[str]:
    """Every model that needs one of `names`, transitively; `names` themselves excluded."""
    start = set(names)
    found: set[str] = set()
    frontier = set(start)
    while frontier:
        frontier = {user for user, uses in needs.items() if set(uses) & frontier} - found - start
        found |= frontier
    return found
