"""Step rewards of the knowledge-base routing environment (R1-Router's step-specific rewards, Step-GRPO).

A reply is one step, either a *query* step (``<query kb="NAME">terms</query>``) or the *answer* step
(``<answer>text</answer>``). Each step gets the weighted sum of the parts that apply to it
(:class:`StepRewardWeights`; the parts are logged separately in the step's ``info["reward_parts"]``):

* query step: ``routing`` = [chosen KB = the gold KB of the current hop] (the first gold hop whose answer
  no earlier search has surfaced; "none" once every hop is covered or for a question that needs no search,
  so any further query scores 0 there: an unnecessary retrieval), ``retrieval_hit`` = [an answer of an
  open gold hop appears in the passages the model is shown], ``query_similarity`` = similarity of the
  query to the gold sub-question (token F1, or cosine of MiniLM sentence embeddings), ``call_cost`` (a
  constant charged per search, to test "fewer unnecessary retrievals"), ``format``;
* answer step: ``answer`` = answer correctness (``answer_metric``: normalised exact match, token F1 or
  token recall against any gold answer; 0 when the answer is longer than ``max_answer_words`` words, so
  recall cannot be gamed by listing candidates), ``format``.

``format`` is 1 when the reply is exactly ``<think>…</think>`` followed by one action tag (whitespace
allowed around), else 0. The public reconstruction of R1-Router scores a routing step as
``0.5 × similarity + 0.5 × [KB = gold]`` and the answer by token recall; that is
``routing: 0.5, query_similarity: 0.5, retrieval_hit: 0, answer_metric: token_recall``.

``reward_mode: outcome`` (Search-R1's outcome-only reward) zeroes every part except ``answer``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from grove.knowledge.text_match import contains_answer, exact_match, token_f1, token_recall

__all__ = [
    "AnswerMetric",
    "ParsedReply",
    "StepRewardWeights",
    "answer_score",
    "format_ok",
    "parse_reply",
    "passages_hit",
    "query_similarity",
]

AnswerMetric = Literal["exact_match", "token_f1", "token_recall"]

_ANSWER_METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "exact_match": exact_match,
    "token_f1": token_f1,
    "token_recall": token_recall,
}


class StepRewardWeights(BaseModel):
    """Weights of the step reward parts (0 switches a part off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    routing: float = Field(0.5, description="Query step: [chosen knowledge base = gold KB of the current hop].")
    retrieval_hit: float = Field(
        0.5, description="Query step: [an answer of an open gold hop is in the passages shown to the model]."
    )
    query_similarity: float = Field(
        0.0, description="Query step: similarity of the query to the gold sub-question (see query_similarity)."
    )
    call_cost: float = Field(0.0, ge=0.0, description="Query step: subtracted once per search.")
    answer: float = Field(1.0, description="Answer step: answer correctness (answer_metric).")
    format: float = Field(0.1, description="Any step: <think>…</think> then exactly one action tag.")


_QUERY_RE = re.compile(r"<query\s+kb\s*=\s*[\"']?([\w-]+)[\"']?\s*>(.*?)(?:</query>|$)", re.DOTALL | re.IGNORECASE)
_ANSWER_RE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_FORMAT_RE = re.compile(
    r"\s*<think>.*?</think>\s*(?:<query\s+kb\s*=\s*[\"']?[\w-]+[\"']?\s*>[^<]*</query>|<answer>[^<]*</answer>)\s*",
    re.DOTALL | re.IGNORECASE,
)


@dataclass(frozen=True)
class ParsedReply:
    """A reply read as an action: ``kind`` is ``"query"``, ``"answer"`` or ``"invalid"`` (with ``reason``)."""

    kind: str
    kb: str = ""
    text: str = ""
    reason: str = ""


def parse_reply(reply: str, untagged_is_answer: bool = False) -> ParsedReply:
    """The first action tag of the reply (a query or the answer); an unclosed last tag counts (generation may
    stop at the closing tag). An empty tag is invalid; so is a reply with neither tag, unless
    ``untagged_is_answer``, when the whole reply (whitespace collapsed) is the answer."""
    query, answer = _QUERY_RE.search(reply), _ANSWER_RE.search(reply)
    first = min((m for m in (query, answer) if m is not None), key=lambda m: m.start(), default=None)
    if first is None:
        untagged = " ".join(reply.split())
        if untagged_is_answer and untagged:
            return ParsedReply("answer", text=untagged)
        return ParsedReply("invalid", reason='no <query kb="NAME">…</query> or <answer>…</answer> in the reply')
    if first is query:
        terms = " ".join(query.group(2).split())
        if not terms:
            return ParsedReply("invalid", kb=query.group(1), reason="empty query")
        return ParsedReply("query", kb=query.group(1).lower(), text=terms)
    text = " ".join(answer.group(1).split())
    if not text:
        return ParsedReply("invalid", reason="empty answer")
    return ParsedReply("answer", text=text)


def format_ok(reply: str) -> bool:
    """``<think>…</think>`` then exactly one closed action tag, nothing else."""
    return _FORMAT_RE.fullmatch(reply) is not None


def answer_score(answer: str, golds: Sequence[str], metric: AnswerMetric, max_words: int) -> float:
    """Correctness of ``answer`` against any of ``golds`` by ``metric``; 0 above ``max_words`` words."""
    if len(answer.split()) > max_words:
        return 0.0
    return float(_ANSWER_METRICS[metric](answer, list(golds)))


def query_similarity(
    query: str, gold_query: str, how: Literal["token_f1", "embedding"], encode: Callable | None = None
) -> float:
    """Similarity of a query to the gold sub-question: token F1 of the normalised words, or the cosine of their
    sentence embeddings (``encode(texts) -> [n, d]`` L2-normalised), clipped at 0."""
    if not gold_query:
        return 0.0
    if how == "token_f1":
        return float(token_f1(query, [gold_query]))
    vectors = encode([query, gold_query])
    return max(0.0, float((vectors[0] * vectors[1]).sum()))


def passages_hit(shown_text: str, answers: Sequence[str]) -> bool:
    """An answer appears (normalised, whole words) in the text the model is shown."""
    return bool(answers) and contains_answer(shown_text, list(answers))
