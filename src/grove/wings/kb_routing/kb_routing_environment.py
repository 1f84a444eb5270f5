"""``kb_routing``: answer a question by routing follow-up queries to the right knowledge base (R1-Router).

Each reply of the model is one step: ``<think>…</think>`` then either ``<query kb="NAME">search terms</query>``
(the environment searches knowledge base NAME and shows the top ``top_k`` passages, truncated to
``passage_token_budget`` tokens of the policy's tokenizer, and the pictures of a picture knowledge base's passages
to a vision-language policy) or ``<answer>…</answer>`` (the episode ends).
The rollout caps the number of steps (``env.max_turns``). A reply with neither tag, an empty one, or an
unknown knowledge base is an invalid action: the state does not change, the step is charged
``env.invalid_action_penalty`` and the model is told what was wrong.

Questions come from :func:`grove.wings.kb_routing.routing_questions` (gold route and a gold (KB, sub-question,
answers) per hop; splits by entity), plus the out-of-distribution quiz set (Debian ``bsdgames``) as the
extra evaluation set ``quiz`` when it is installed. Knowledge bases are built once per process and
cached on disk (:mod:`grove.knowledge`); the names the model uses (``text``, ``tables``, ``medical``)
map to registry ids in ``knowledge_bases``. Answering directly is the "none" route.

Step rewards are in :mod:`grove.wings.kb_routing.kb_routing_rewards`. The step type (``info["step_type"]``: ``query``,
``answer`` or ``invalid``) lets Step-GRPO compare corresponding steps; every step's ``info["route"]`` is the
question's gold route (``tables``, ``text>tables``, ``pictures``, ``none``...), so results can be read per route. The anchor state (GiGPO) is the
question and the searches done so far (knowledge base and normalised terms), so trajectories that issued
the same searches share a state. ``summarize`` gives answer accuracy, routing accuracy, retrieval hit rate,
searches per question, unnecessary searches and invalid actions, overall and per knowledge base.

Oracle (:mod:`grove.envs.oracle`): :meth:`KbRoutingEnv.oracle_action` replies along the gold route: a search of
the first hop whose answer no search has surfaced yet (its gold knowledge base and sub-question), then the answer
(a gold answer the results showed, else the canonical one).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.knowledge import KnowledgeBase, build_knowledge_base
from grove.knowledge.text_match import normalize_answer
from grove.registry import ENVIRONMENTS
from grove.wings.kb_routing.kb_routing_metrics import NONE_ROUTE, summarize_episodes
from grove.wings.kb_routing.kb_routing_rewards import (
    AnswerMetric,
    StepRewardWeights,
    answer_score,
    format_ok,
    parse_reply,
    passages_hit,
    query_similarity,
)
from grove.wings.kb_routing.quiz_questions import quiz_questions
from grove.wings.kb_routing.routing_question_types import (
    DEFAULT_KB_IDS,
    OPTIONAL_KB_IDS,
    GoldStep,
    RoutingQuestion,
    RoutingQuestionParams,
)
from grove.wings.kb_routing.routing_questions import routing_questions

__all__ = ["KbRoutingEnv", "KbRoutingParams", "kb_routing_suite"]


class KbRoutingParams(BaseModel):
    """Parameters of the ``kb_routing`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    knowledge_bases: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {name: {"id": kb_id} for name, kb_id in DEFAULT_KB_IDS.items()},
        description="Name the model uses -> {id: registry id, <param>: value}. The built-in questions route to "
        "'text', 'tables' and 'medical'; e.g. {text: {id: wikipedia_text, retriever: dense}} for dense retrieval.",
    )
    questions: dict[str, Any] = Field(
        default_factory=dict, description="Parameters of the question builder (grove.knowledge.RoutingQuestionParams)."
    )
    eval_split: Literal["validation", "test"] = Field("test", description="Held-out split played by evaluation.")
    quiz_eval: bool = Field(
        True, description="Also evaluate on the out-of-distribution bsdgames quiz set (as 'quiz/…') when installed."
    )
    quiz_unseen_only: bool = Field(
        True,
        description="Leave out of the quiz set the questions asked verbatim in the training split (185 of the 393: "
        "the quiz and the tables share most countries and elements).",
    )
    max_train_questions: int | None = Field(
        None, ge=1, description="Use only N training questions, evenly spaced over the categories."
    )
    max_eval_questions: int | None = Field(
        None, ge=1, description="Use only N held-out questions per evaluation set, evenly spaced over the categories (and "
        "ordered round-robin over them, so eval.max_examples takes every category)."
    )
    demonstration: bool = Field(
        True,
        description="Add a worked example of the reply format to the instructions (a question of no built-in "
        "category; small models otherwise rarely write the tags).",
    )
    untagged_reply: Literal["invalid", "answer"] = Field(
        "invalid",
        description="A reply with neither tag: 'invalid' (an invalid action) or 'answer' (the whole reply is read as "
        "the answer, i.e. answering without retrieval; for small models that rarely write the tags).",
    )
    top_k: int = Field(3, ge=1, le=20, description="Passages returned per search.")
    passage_token_budget: int = Field(
        160, ge=1, description="Tokens of search results shown per search (policy tokenizer; words without one)."
    )
    reward_mode: Literal["step", "outcome"] = Field(
        "step",
        description="'step': every step gets its own reward (routing, retrieval hit, query similarity, call cost, "
        "format; answer, format); 'outcome': only the answer's correctness, on the answer step (Search-R1's reward).",
    )
    rewards: StepRewardWeights = Field(default_factory=StepRewardWeights, description="Weights of the reward parts.")
    answer_metric: AnswerMetric = Field(
        "token_recall",
        description="Answer correctness: 'exact_match', 'token_f1' or 'token_recall' (R1-Router's) against any gold "
        "answer (normalised). An episode is won when it is 1.",
    )
    max_answer_words: int = Field(12, ge=1, description="Answers longer than this many words score 0.")
    query_similarity: Literal["token_f1", "embedding"] = Field(
        "token_f1",
        description="How the query_similarity part compares the query with the gold sub-question: token F1, or "
        "the cosine of all-MiniLM-L6-v2 sentence embeddings (R1-Router uses BGE embeddings).",
    )

    @field_validator("knowledge_bases")
    @classmethod
    def _check_kbs(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, spec in v.items():
            if not name.replace("_", "").replace("-", "").isalnum() or name != name.lower():
                raise ValueError(f"knowledge base name {name!r} must be lower-case letters, digits, '_' or '-'")
            if name == NONE_ROUTE:
                raise ValueError("'none' is not a knowledge base: answering directly is the none route")
            if not isinstance(spec, dict) or "id" not in spec:
                raise ValueError(f"knowledge_bases.{name} must be a mapping with an 'id' (a knowledge base registry id)")
        return v


class _Shared:
    """What every copy of the environment shares: questions, knowledge bases, token counting, settings."""

    def __init__(
        self,
        params: KbRoutingParams,
        questions: Sequence[RoutingQuestion],
        tokenizer: Any,
        kbs: dict[str, KnowledgeBase] | None = None,
    ) -> None:
        self.params = params
        self.questions = list(questions)
        self.kbs = kbs if kbs is not None else {
            name: build_knowledge_base(spec["id"], {k: v for k, v in spec.items() if k != "id"})
            for name, spec in params.knowledge_bases.items()
        }
        self.tokenizer = tokenizer
        self._encode = None
        w = params.rewards
        #: the weights in force: in outcome mode every part but the answer's is off
        self.weights = w if params.reward_mode == "step" else StepRewardWeights(
            routing=0, retrieval_hit=0, query_similarity=0, call_cost=0, answer=w.answer, format=0
        )

    def truncate(self, text: str) -> str:
        """``text`` cut to ``passage_token_budget`` tokens (of the policy tokenizer, else whitespace words)."""
        budget = self.params.passage_token_budget
        if self.tokenizer is None:
            words = text.split(" ")
            return text if len(words) <= budget else " ".join(words[:budget]) + " …"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= budget else self.tokenizer.decode(ids[:budget]) + " …"

    def similarity(self, query: str, gold: GoldStep | None) -> float:
        """Query vs the hop's gold sub-question (0 without an open hop); embeddings are computed only when the part
        is weighted (token F1 always: it is cheap and logged)."""
        how = self.params.query_similarity
        if gold is None or (how == "embedding" and self.weights.query_similarity == 0):
            return 0.0
        if how == "embedding" and self._encode is None:
            from grove.wings.kb_routing.sentence_embeddings import encode_texts

            self._encode = encode_texts
        return query_similarity(query, gold.sub_question, how, self._encode)


class KbRoutingEnv:
    """One copy of the routing environment (state: the question, the searches done, the gold hops covered)."""

    def __init__(self, shared: _Shared) -> None:
        self.shared = shared
        self.question: RoutingQuestion | None = None
        self.searches: list[tuple[str, str]] = []
        self.covered: list[bool] = []
        self.shown: list[str] = []  # the results text of each search, as the model saw it
        self.answered = False
        self.task_id = -1

    # ------------------------------------------------------------------ observations
    def _observation(self, text: str, images: tuple = ()) -> Observation:
        anchor = (self.task_id, tuple(self.searches))
        return Observation(text=text, anchor=anchor, images=images)

    def reset(self, task_id: int, seed: int) -> Observation:
        self.task_id = task_id
        self.question = self.shared.questions[task_id]
        self.searches = []
        self.covered = [False] * len(self.question.steps)
        self.shown = []
        self.answered = False
        return self._observation(f"Question: {self.question.question}")

    def _current_hop(self) -> int | None:
        return next((i for i, done in enumerate(self.covered) if not done), None)

    # ------------------------------------------------------------------ step
    def step(self, action: str) -> Transition:
        if self.question is None:
            raise RuntimeError("kb_routing: step() before reset()")
        reply = parse_reply(action, untagged_is_answer=self.shared.params.untagged_reply == "answer")
        fmt = 1.0 if format_ok(action) else 0.0
        if reply.kind == "query" and reply.kb not in self.shared.kbs:
            known = ", ".join(sorted(self.shared.kbs))
            reply = type(reply)("invalid", reason=f"unknown knowledge base {reply.kb!r} (known: {known})")
        if reply.kind == "invalid":
            info = {"step_type": "invalid", "invalid_action": True, "reason": reply.reason, "route": self.question.route}
            text = f"Invalid reply: {reply.reason}. Reply with <query kb=\"NAME\">…</query> or <answer>…</answer>."
            return Transition(self._observation(text), 0.0, False, info)
        if reply.kind == "answer":
            return self._answer(reply.text, fmt)
        return self._query(reply.kb, reply.text, fmt)

    def _query(self, kb: str, terms: str, fmt: float) -> Transition:
        p, q, w = self.shared.params, self.question, self.shared.weights
        hop = self._current_hop()
        gold = q.steps[hop] if hop is not None else None
        passages = self.shared.kbs[kb].search(terms, p.top_k)
        lines = [f"[{i}] {ps.text}" for i, ps in enumerate(passages, start=1)]  # passages name their own subject
        shown = self.shared.truncate("\n".join(lines)) if lines else "(no results)"
        images = tuple(image for ps in passages for image in ps.images)  # a picture KB's: before the text
        # a hit: the answer in the text shown, or in what a shown picture shows (its image_facts, never shown)
        evidence = " ".join([shown, *(ps.image_facts for ps in passages if ps.image_facts)])
        open_hops = [i for i, done in enumerate(self.covered) if not done]
        hits = [i for i in open_hops if passages_hit(evidence, q.steps[i].answers)]
        for i in hits:
            self.covered[i] = True
        parts = {
            "routing": float(gold is not None and kb == gold.kb),
            "retrieval_hit": float(bool(hits)),
            "query_similarity": self.shared.similarity(terms, gold),
            "call_cost": -1.0,
            "format": fmt,
        }
        reward = sum(getattr(w, name) * value for name, value in parts.items())
        self.searches.append((kb, normalize_answer(terms)))
        self.shown.append(shown)
        info = {
            "step_type": "query",
            "kb": kb,
            "gold_kb": gold.kb if gold is not None else NONE_ROUTE,
            "route": q.route,
            "routing_correct": bool(parts["routing"]),
            "hit": bool(hits),
            "reward_parts": parts,
        }
        text = f'Results from {kb} for "{terms}":\n{shown}'
        return Transition(self._observation(text, images), float(reward), False, info)

    def _answer(self, text: str, fmt: float) -> Transition:
        p, q, w = self.shared.params, self.question, self.shared.weights
        score = answer_score(text, q.answers, p.answer_metric, p.max_answer_words)
        parts = {"answer": score, "format": fmt}
        reward = w.answer * score + w.format * fmt
        self.answered = True
        info = {
            "step_type": "answer",
            "answer": text,
            "answer_score": score,
            "won": score >= 1.0,
            "outcome": score,
            "searches": len(self.searches),
            "route": q.route,
            "reward_parts": parts,
        }
        return Transition(self._observation("The episode is over."), float(reward), True, info)

    # ------------------------------------------------------------------ oracle
    def oracle_action(self) -> str | None:
        """The gold route's next reply (the whole reply: this environment reads the tags itself).

        For the first gold hop whose answer no search has surfaced, ``<think>…</think><query kb="NAME">…</query>``
        with the hop's gold knowledge base and gold sub-question (a hop whose answer an earlier search already
        showed, e.g. the capital's population among the rows found for the capital, needs no search of its own);
        a hop whose gold search was already made without surfacing its answer, or whose knowledge base this
        environment does not have, is passed over. Then
        ``<think>…</think><answer>…</answer>`` with the first gold answer that the search results showed (else the
        canonical one). ``None`` before ``reset`` and after the answer.
        """
        q = self.question
        if q is None or self.answered:
            return None
        for hop, covered in enumerate(self.covered):
            gold = q.steps[hop]
            kb = self._kb_name(gold.kb)
            if covered or kb is None or (kb, normalize_answer(gold.sub_question)) in self.searches:
                continue
            lead = "Next, search" if self.searches else "Search"
            return f'<think>{lead} the {kb} knowledge base for "{gold.sub_question}".</think>' + (
                f'<query kb="{kb}">{gold.sub_question}</query>'
            )
        seen = next((a for a in q.answers if any(passages_hit(text, [a]) for text in self.shown)), None)
        if seen is not None:
            return f"<think>The results name {seen}.</think><answer>{seen}</answer>"
        why = "This needs no search." if not q.steps else "The searches point to the answer."
        return f"<think>{why}</think><answer>{q.answers[0]}</answer>"

    def _kb_name(self, role: str) -> str | None:
        """The name this environment gives the knowledge base of a gold role: the role itself, else the name
        configured with the role's default registry id (``DEFAULT_KB_IDS``, ``OPTIONAL_KB_IDS``); ``None`` when there
        is none."""
        if role in self.shared.kbs:
            return role
        kb_id = {**DEFAULT_KB_IDS, **OPTIONAL_KB_IDS}.get(role)
        specs = self.shared.params.knowledge_bases
        return next((name for name, spec in specs.items() if spec["id"] == kb_id and name in self.shared.kbs), None)


# --------------------------------------------------------------------------- suite
INSTRUCTIONS = (
    "Answer the question. You may first search knowledge bases, one search per reply:\n{kbs}\n"
    "Each reply: think briefly inside <think></think>, then EITHER search one knowledge base with "
    '<query kb="NAME">search terms</query> OR give the final answer with <answer>short answer</answer>. '
    "Search results come back in the next message. Answer directly when you need no search."
)

#: shown after the instructions when ``demonstration`` is on (a question of no built-in category, so it gives
#: away the format and never an answer)
DEMONSTRATION = (
    "\n\nExample.\nQuestion: Who wrote the novel Frankenstein?\n"
    'Reply: <think>A book and its author: the encyclopedia.</think><query kb="text">Frankenstein novel author</query>\n'
    "(results)\n"
    "Reply: <think>The results name Mary Shelley.</think><answer>Mary Shelley</answer>"
)


def _spread(ids: list[int], n: int | None) -> list[int]:
    """``n`` ids evenly spaced over ``ids`` (the question lists are ordered by category, so a prefix would hold one
    or two categories only); all of them when ``n`` is ``None`` or not smaller."""
    if n is None or n >= len(ids):
        return list(ids)
    return [ids[(k * len(ids)) // n] for k in range(n)]


def _interleaved(ids: list[int], questions: Sequence[RoutingQuestion]) -> list[int]:
    """``ids`` round-robin over their categories, so that any prefix (evaluation's first ``eval.max_examples``)
    covers every category."""
    by_category: dict[str, list[int]] = defaultdict(list)
    for i in ids:
        by_category[questions[i].category].append(i)
    queues = list(by_category.values())
    return [q[k] for k in range(max((len(q) for q in queues), default=0)) for q in queues if k < len(q)]


@functools.lru_cache(maxsize=4)
def _questions(params_json: str, with_quiz: bool) -> tuple[list[RoutingQuestion], list[RoutingQuestion]]:
    qparams = RoutingQuestionParams.model_validate_json(params_json)
    return routing_questions(qparams), (quiz_questions() if with_quiz else [])


@ENVIRONMENTS.register("kb_routing", params=KbRoutingParams)
def kb_routing_suite(params: KbRoutingParams, *, tokenizer: Any = None) -> EnvironmentSuite:
    """The routing QA environment: train on the training questions, evaluate on ``eval_split`` and the quiz set."""
    qparams = RoutingQuestionParams.model_validate(params.questions)
    built, quiz = _questions(qparams.model_dump_json(), params.quiz_eval)
    questions = list(built) + list(quiz)
    by_split: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(questions):
        by_split[q.split].append(i)
    train = _spread(by_split["train"], params.max_train_questions)  # the task sampler shuffles them
    held_out = _interleaved(_spread(by_split[params.eval_split], params.max_eval_questions), questions)
    trained = {questions[i].question for i in by_split["train"]}
    quiz = [i for i in by_split.get("quiz", []) if not (params.quiz_unseen_only and questions[i].question in trained)]
    extra = {"quiz": _interleaved(_spread(quiz, params.max_eval_questions), questions)} if quiz else {}
    shared = _Shared(params, questions, tokenizer)
    kb_lines = "\n".join(f"- {name}: {kb.description}" for name, kb in shared.kbs.items())
    return EnvironmentSuite(
        name="kb_routing",
        make=lambda: KbRoutingEnv(shared),
        train_tasks=train,
        eval_tasks=held_out,
        instructions=INSTRUCTIONS.format(kbs=kb_lines) + (DEMONSTRATION if params.demonstration else ""),
        metadata={"questions": len(questions), "splits": {k: len(v) for k, v in by_split.items()}},
        summarize=lambda records: summarize_episodes(records, questions),
        extra_eval_tasks=extra,
    )

