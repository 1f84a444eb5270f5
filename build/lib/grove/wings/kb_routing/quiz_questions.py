"""Out-of-distribution routing questions from the BSD ``quiz`` game's data files (Debian package
``bsdgames``).

The files live in ``/usr/share/games/bsdgames/quiz/``; its ``index`` names each file's fields (``africa``,
``america``, ``asia``, ``europe``: ``country:capital``; ``elements``: ``symbol:number:weight:element``).
A field is a pattern in quiz(6)'s notation, expanded here into every string it accepts:

* ``a|b``: alternatives (``Vienna|Wien``);
* ``[x|y]``: a group of alternatives inside a word (``Andorra la V[ell|iej]a`` -> "Andorra la Vella",
  "Andorra la Vieja");
* ``{x}``: an optional part, possibly nested or with alternatives (``{{People's }Republic of }China`` ->
  "People's Republic of China", "Republic of China", "China"; the variant *with* the part comes first);
* ``\\x``: the character ``x`` literally.

quiz spells accented letters as teletype overstrikes, an accent mark and the letter joined by a backspace in
either order, offered next to the bare letter: ``Yaound['<BS>e|e<BS>'|e]``, ``C[^<BS>o|o<BS>^|o]te``,
``K[o|o<BS>/|/<BS>o]benhavn`` (``<BS>`` = ``\\b``; most terminals show just ``['e|e'|e]``). Such an
alternative becomes the accented letter (``'`` acute, `````` grave, ``^`` circumflex, ``~`` tilde, ``"``
diaeresis, ``,`` cedilla (comma below for s and t), ``°`` ring, ``/`` stroke), so the pattern gives "Yaoundé"
and "Yaounde"; any other backspace is dropped. A line ending in a backslash continues on the next line.

Questions (split ``"quiz"``): "What is the capital of {country}?" (category ``country_capital``, gold route
``tables``: "capital of {country}") and, per element, "What is the chemical symbol of {element}?" and "What
is the atomic number of {element}?" (``element_symbol``, ``element_number``). The entity must be a row of the
default ``tables`` KB: the first alternative of the country (element) field whose normalised form
(:func:`grove.knowledge.text_match.normalize_answer`, which drops "The" and accents) equals a country
(element) name there; it is also the name the question uses. Other lines are skipped and counted, as are
capitals containing the country's name (Singapore); a country in two files (Kazakhstan) is asked once.
Answers: the quiz's expanded alternatives, the quiz's own first form first, then the KB's value when it
differs (the quiz data is older: "Lw" for lawrencium, Bujumbura for Burundi), so an agent that trusts the
retrieved row is not marked wrong; the gold hop's answers are the KB's value. :func:`quiz_question_report`
gives the counts.
"""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path
from typing import Any

from grove.knowledge.knowledge_base_builds import build_knowledge_base
from grove.knowledge.text_match import contains_answer, normalize_answer
from grove.wings.kb_routing.routing_question_types import DEFAULT_KB_IDS, GoldStep, RoutingQuestion, route_of

__all__ = [
    "CAPITAL_FILES",
    "DEFAULT_QUIZ_DIR",
    "expand_quiz_pattern",
    "parse_quiz_line",
    "quiz_question_report",
    "quiz_questions",
]

log = logging.getLogger(__name__)

DEFAULT_QUIZ_DIR = "/usr/share/games/bsdgames/quiz"
CAPITAL_FILES = ("africa", "america", "asia", "europe")
ELEMENTS_FILE = "elements"
MAX_EXPANSIONS = 512
BACKSPACE = "\b"

_COMBINING = {
    "'": "\u0301",  # acute
    "`": "\u0300",  # grave
    "^": "\u0302",  # circumflex
    "~": "\u0303",  # tilde
    '"': "\u0308",  # diaeresis
    ",": "\u0327",  # cedilla (comma below for s, t)
    "°": "\u030a",  # ring above
}
_STROKE = {"o": "ø", "O": "Ø", "d": "đ", "D": "Đ", "l": "ł", "L": "Ł"}


def _accented(alt: str) -> tuple[str, str] | None:
    """``(accented letter, bare letter)`` for quiz's overstrike spelling ``alt`` ("'<BS>e" or "e<BS>'" -> "é";
    the backspace is optional), else None."""
    alt = alt.replace(BACKSPACE, "")
    if len(alt) != 2:
        return None
    for mark, letter in ((alt[0], alt[1]), (alt[1], alt[0])):
        if not letter.isalpha():
            continue
        if mark == "/" and letter in _STROKE:
            return _STROKE[letter], letter
        if mark in _COMBINING:
            combining = "\u0326" if mark == "," and letter in "sStT" else _COMBINING[mark]
            return unicodedata.normalize("NFC", letter + combining), letter
    return None


def _accent_group(alts: list[str]) -> list[str]:
    """Inside ``[...]``: replace accent spellings by the accented letter when the bare letter is an
    alternative too."""
    bare = {a for a in alts if len(a) == 1}
    out: list[str] = []
    for a in alts:
        accented = _accented(a)
        if accented is not None and accented[1] in bare:
            a = accented[0]
        if a not in out:
            out.append(a)
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def alternatives(self) -> list[str]:
        alts = self.sequence()
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            alts = alts + [a for a in self.sequence() if a not in alts]
        return alts

    def sequence(self) -> list[str]:
        results = [""]
        while self.i < len(self.s) and self.s[self.i] not in "|]}":
            ch = self.s[self.i]
            if ch in "[{":
                self.i += 1
                alts = self.alternatives()
                close = "]" if ch == "[" else "}"
                if self.i >= len(self.s) or self.s[self.i] != close:
                    raise ValueError(f"unbalanced {ch!r} in quiz pattern {self.s!r}")
                self.i += 1
                alts = _accent_group(alts) if ch == "[" else alts + [""]
            elif ch == "\\" and self.i + 1 < len(self.s):
                alts = [self.s[self.i + 1]]
                self.i += 2
            else:
                alts = [ch]
                self.i += 1
            results = [r + a for r in results for a in alts]
            if len(results) > MAX_EXPANSIONS:
                raise ValueError(f"quiz pattern {self.s!r} expands to more than {MAX_EXPANSIONS} strings")
        return results


def expand_quiz_pattern(pattern: str) -> list[str]:
    """Every string quiz pattern ``pattern`` accepts, in pattern order, whitespace collapsed, duplicates
    dropped.

    ``expand_quiz_pattern("Andorra la V[ell|iej]a")`` == ``["Andorra la Vella", "Andorra la Vieja"]``."""
    parser = _Parser(pattern.strip())
    alts = parser.alternatives()
    if parser.i != len(parser.s):
        raise ValueError(f"unbalanced {parser.s[parser.i]!r} in quiz pattern {pattern!r}")
    out: list[str] = []
    for a in alts:
        a = " ".join(a.replace(BACKSPACE, "").split())
        if a and a not in out:
            out.append(a)
    return out


def parse_quiz_line(line: str) -> list[list[str]]:
    """The expanded fields of one data line (fields split at ``:`` outside brackets and after escapes)."""
    fields, depth, current, i = [], 0, [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            current.append(line[i : i + 2])
            i += 2
            continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == ":" and depth == 0:
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    fields.append("".join(current))
    return [expand_quiz_pattern(f) for f in fields]


def _lines(path: Path) -> list[str]:
    """The data lines of a quiz file: continuation lines (trailing backslash) joined, blank lines dropped."""
    out: list[str] = []
    pending = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append(line)
    if pending.strip():
        out.append(pending)
    return out


def _file_report(lines: int, kept: int, skipped: list[str], disagree: list[str]) -> dict[str, Any]:
    return {"lines": lines, "kept": kept, "skipped": len(skipped), "skipped_entities": skipped, "kb_disagrees": disagree}


def _capital_questions(
    path: Path, name: str, countries: dict[str, dict[str, Any]], asked: set[str]
) -> tuple[list[RoutingQuestion], dict[str, Any]]:
    """The capital questions of one quiz file whose countries the tables KB knows (each country once over the files:
    ``asked``), and the file's report."""
    questions: list[RoutingQuestion] = []
    kept, skipped, disagree, lines = 0, [], [], _lines(path)
    duplicates: list[str] = []
    for line in lines:
        fields = parse_quiz_line(line)
        if len(fields) < 2 or not fields[0] or not fields[1]:
            skipped.append(line)
            continue
        match = next(
            ((alt, countries[normalize_answer(alt)]) for alt in fields[0] if normalize_answer(alt) in countries), None
        )
        if match is None or not match[1]["capital"] or _gives_away(match[0], fields[1]):
            skipped.append(fields[0][0])
            continue
        country, row = match
        if row["iso"] in asked:
            duplicates.append(country)
            continue
        asked.add(row["iso"])
        capital = row["capital"]
        answers = list(fields[1])
        if not any(normalize_answer(a) == normalize_answer(capital) for a in answers):
            answers.append(capital)
            disagree.append(f"{country}: quiz {fields[1][0]!r}, tables {capital!r}")
        steps = (GoldStep("tables", f"capital of {country}", (capital,)),)
        questions.append(
            RoutingQuestion(
                qid=f"quiz:{name}:{normalize_answer(country).replace(' ', '_')}",
                question=f"What is the capital of {country}?",
                answers=tuple(answers),
                steps=steps,
                category="country_capital",
                route=route_of(steps),
                split="quiz",
            )
        )
        kept += 1
    return questions, {**_file_report(len(lines), kept, skipped, disagree), "duplicates": duplicates}


_ELEMENT_QUESTIONS = (  # category, quiz field, tables column, question, sub-query
    ("element_symbol", 0, "symbol", "What is the chemical symbol of {}?", "chemical symbol of {}"),
    ("element_number", 1, "number", "What is the atomic number of {}?", "atomic number of {}"),
)


def _element_questions(
    path: Path, elements: dict[str, dict[str, Any]]
) -> tuple[list[RoutingQuestion], dict[str, Any]]:
    """The symbol and atomic-number questions of the elements quiz file whose elements the tables KB knows, and the
    file's report."""
    questions: list[RoutingQuestion] = []
    kept, skipped, disagree, lines = 0, [], [], _lines(path)
    for line in lines:
        fields = parse_quiz_line(line)
        if len(fields) < 4 or not fields[0] or not fields[1] or not fields[3]:
            skipped.append(line)
            continue
        match = next(
            ((alt, elements[normalize_answer(alt)]) for alt in fields[3] if normalize_answer(alt) in elements), None
        )
        if match is None:
            skipped.append(fields[3][0])
            continue
        element, row = match
        for category, quiz_field, column, template, sub in _ELEMENT_QUESTIONS:
            kb_value = str(row[column])
            answers = list(fields[quiz_field])
            if kb_value not in answers:
                answers.append(kb_value)
                disagree.append(f"{element} {category}: quiz {fields[quiz_field][0]!r}, tables {kb_value!r}")
            steps = (GoldStep("tables", sub.format(element), (kb_value,)),)
            questions.append(
                RoutingQuestion(
                    qid=f"quiz:elements:{category}:{row['number']}",
                    question=template.format(element),
                    answers=tuple(answers),
                    steps=steps,
                    category=category,
                    route=route_of(steps),
                    split="quiz",
                )
            )
        kept += 1
    return questions, _file_report(len(lines), kept, skipped, disagree)


def _build(quiz_dir: Path, cache_dir: str | None) -> tuple[list[RoutingQuestion], dict[str, Any]]:
    tables = build_knowledge_base(DEFAULT_KB_IDS["tables"], {"cache_dir": cache_dir})
    countries: dict[str, dict[str, Any]] = {}
    elements: dict[str, dict[str, Any]] = {}
    for f in tables.fields:
        if f.get("table") == "countries":
            countries.setdefault(normalize_answer(f["name"]), f)
        elif f.get("table") == "elements":
            elements.setdefault(normalize_answer(f["name"]), f)
    questions: list[RoutingQuestion] = []
    report: dict[str, Any] = {"files": {}, "kept": 0, "skipped": 0}
    asked: set[str] = set()  # countries already asked (Kazakhstan is in both asia and europe)
    parts = [(name, lambda path, name=name: _capital_questions(path, name, countries, asked)) for name in CAPITAL_FILES]
    parts.append((ELEMENTS_FILE, lambda path: _element_questions(path, elements)))
    for name, questions_of in parts:
        path = quiz_dir / name
        if not path.is_file():
            continue
        found, file_report = questions_of(path)
        questions.extend(found)
        report["files"][name] = file_report
        report["kept"] += file_report["kept"]
        report["skipped"] += file_report["skipped"]
    report["questions"] = len(questions)
    log.info(
        "quiz questions from %s: %d questions; entities kept %d, skipped %d (not in the tables KB)",
        quiz_dir, len(questions), report["kept"], report["skipped"],
    )
    return questions, report


def _gives_away(country: str, capitals: list[str]) -> bool:
    return any(contains_answer(c, [country]) for c in capitals)


_MEMO: dict[tuple[str, str | None], tuple[list[RoutingQuestion], dict[str, Any]]] = {}


def _load(quiz_dir: str | Path, cache_dir: str | None) -> tuple[list[RoutingQuestion], dict[str, Any]]:
    path = Path(quiz_dir)
    if not path.is_dir():
        return [], {"files": {}, "kept": 0, "skipped": 0, "questions": 0, "missing": str(path)}
    key = (str(path.resolve()), cache_dir)
    if key not in _MEMO:
        _MEMO[key] = _build(path, cache_dir)
    return _MEMO[key]


def quiz_questions(
    quiz_dir: str | Path = DEFAULT_QUIZ_DIR, cache_dir: str | None = None
) -> list[RoutingQuestion]:
    """The out-of-distribution quiz questions (split ``"quiz"``; see the module docstring); ``[]`` when
    ``quiz_dir`` does not exist. ``cache_dir`` is passed to the ``tables`` KB used to check the entities."""
    return list(_load(quiz_dir, cache_dir)[0])


def quiz_question_report(
    quiz_dir: str | Path = DEFAULT_QUIZ_DIR, cache_dir: str | None = None
) -> dict[str, Any]:
    """Per file: data lines, entities kept and skipped (with the skipped names), and where the quiz's answer
    differs from the tables KB's; totals."""
    return _load(quiz_dir, cache_dir)[1]
