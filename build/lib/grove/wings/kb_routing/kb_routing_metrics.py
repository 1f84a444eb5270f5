"""The routing metrics of ``kb_routing`` episodes (:mod:`grove.wings.kb_routing.kb_routing_environment`): answer and routing accuracy,
searches per question, retrieval hits, overall and per knowledge base."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from grove.envs.base import EpisodeRecord
from grove.wings.kb_routing.routing_question_types import RoutingQuestion

__all__ = ["NONE_ROUTE", "summarize_episodes"]

NONE_ROUTE = "none"
"""The route of a direct answer (no search), and the gold knowledge base of a hop that needs none."""


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize_episodes(records: Sequence[EpisodeRecord], questions: Sequence[RoutingQuestion]) -> dict[str, float]:
    """Routing metrics of played episodes, overall and per knowledge base (``kb/<name>/<metric>``).

    Episode metrics (answer accuracy, searches per question, answered fraction, first-route accuracy: the
    first action goes to the gold KB of the first hop, or answers directly when none is needed) are grouped
    by the question's first gold KB (``none`` for a question that needs no search); step metrics (routing
    accuracy, retrieval hit rate) by the gold KB of the hop the query was for (``none``: an unnecessary
    search, never correct).
    """
    episodes: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        q = questions[rec.task_id]
        first_kb = q.steps[0].kb if q.steps else NONE_ROUTE
        infos = [i for i, ok in zip(rec.infos, rec.valid, strict=True) if ok]
        queries = [i for i in infos if i.get("step_type") == "query"]
        answered = [i for i in infos if i.get("step_type") == "answer"]
        # the first valid action's route: the KB searched, or none for a direct answer
        first_route = None if not infos else infos[0].get("kb", NONE_ROUTE)
        for key in ("all", f"kb/{first_kb}"):
            e = episodes[key]
            e["answer_accuracy"].append(float(any(i.get("won") for i in answered)))
            e["answered_fraction"].append(float(bool(answered)))
            e["searches_per_question"].append(float(len(queries)))
            e["first_route_accuracy"].append(float(first_route == first_kb))
            e["invalid_action_rate"].append(_mean([float(not ok) for ok in rec.valid]))
        for info in queries:
            for key in ("all", f"kb/{info['gold_kb']}"):
                e = episodes[key]
                e["routing_accuracy"].append(float(info["routing_correct"]))
                e["retrieval_hit_rate"].append(float(info["hit"]))
                e["unnecessary_search_rate"].append(float(info["gold_kb"] == NONE_ROUTE))
    out: dict[str, float] = {}
    for key, metrics in episodes.items():
        prefix = "" if key == "all" else f"{key}/"
        for name, values in metrics.items():
            out[f"{prefix}{name}"] = _mean(values)
    return out
