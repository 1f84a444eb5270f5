"""Action parsers: from model text to one environment command (grove.envs.actions)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import grove.envs  # noqa: F401  (registers the parsers)
from grove.envs.actions import AdmissibleParams, ParsedAction, TagParams, normalize_action
from grove.envs.base import Observation
from grove.registry import ACTION_PARSERS, NoParams

MOVES = Observation("grid", 0, ("left", "down", "right", "up"))
COMMANDS = Observation("room", "a", ("go north", "open door", "take coin from table"))
FREE = Observation("anything goes", "a", None)


def tag(text: str, obs: Observation = MOVES, **params) -> ParsedAction:
    return ACTION_PARSERS.get("tag")(text, obs, TagParams(**params))


def admissible(text: str, obs: Observation = COMMANDS, **params) -> ParsedAction:
    return ACTION_PARSERS.get("admissible")(text, obs, AdmissibleParams(**params))


def raw(text: str, obs: Observation = FREE) -> ParsedAction:
    return ACTION_PARSERS.get("raw")(text, obs, NoParams())


def test_parsers_are_registered_with_their_params():
    assert {"tag", "admissible", "raw"} <= set(ACTION_PARSERS.ids())
    assert ACTION_PARSERS.entry("tag").params is TagParams
    assert ACTION_PARSERS.entry("admissible").params is AdmissibleParams
    assert ACTION_PARSERS.validate_params("tag", {"tag": "move"}).tag == "move"
    with pytest.raises(ValidationError, match="tag name"):
        TagParams(tag="<action>")
    with pytest.raises(ValidationError):
        AdmissibleParams(cutoff=1.5)


def test_tag_reads_the_last_tag_and_returns_the_admissible_spelling():
    assert tag("I go <action>left</action> no, <action> RIGHT </action>") == ParsedAction("right", True)
    assert tag("<action>\n  Up\n</action>") == ParsedAction("up", True)
    assert tag("<ACTION>down</ACTION>").action == "down"
    assert tag('<action>"[Down]."</action>').action == "down"
    assert tag("<action>go   North</action>", COMMANDS).action == "go north"


def test_tag_numbers_select_the_listed_action_one_based():
    assert tag("<action>2</action>") == ParsedAction("down", True)
    assert tag("<action>(4)</action>").action == "up"
    assert tag("<action>3. take coin from table</action>", COMMANDS).action == "take coin from table"
    out_of_range = tag("<action>5</action>")
    assert not out_of_range.valid and out_of_range.action is None and "1..4" in out_of_range.reason
    assert not tag("<action>0</action>").valid
    assert not tag("<action>2</action>", allow_number=False).valid


def test_tag_invalid_answers_say_why():
    missing = tag("I think left is best")
    assert not missing.valid and "no <action>" in missing.reason
    wrong = tag("<action>jump</action>")
    assert not wrong.valid and "not an admissible action" in wrong.reason
    assert not tag("<action>  </action>").valid
    assert tag("<move>left</move>", tag="move").action == "left"
    assert not tag("<action>left</action>", tag="move").valid


def test_tag_without_a_list_or_admissibility_check_keeps_the_content():
    assert tag("<action>Open the red Door</action>", FREE) == ParsedAction("Open the red Door", True)
    assert tag("<action>jump</action>", must_be_admissible=False) == ParsedAction("jump", True)


def test_tag_accepts_an_unclosed_last_tag_cut_by_a_stop_string():
    assert tag("<think>go down</think>\n<action>down").action == "down"


def test_tag_think_requirement():
    assert tag("<think>hole ahead</think><action>left</action>", require_think=True).action == "left"
    no_think = tag("<action>left</action>", require_think=True)
    assert not no_think.valid and "<think>" in no_think.reason
    assert not tag("<action>left</action><think>late</think>", require_think=True).valid
    assert tag("<action>left</action>").valid  # not required by default


def test_admissible_uses_the_tag_or_the_first_line_and_fuzzy_matches():
    assert admissible("<action>go nrth</action>") == ParsedAction("go north", True)
    assert admissible("\n  Open Door\nbecause it is closed") == ParsedAction("open door", True)
    assert admissible("take the coin from table").action == "take coin from table"
    assert admissible("2").action == "open door"
    assert admissible("<action>3</action>").action == "take coin from table"
    no_match = admissible("dance wildly")
    assert not no_match.valid and "cutoff" in no_match.reason
    assert not admissible("go nrth", cutoff=0.99).valid
    assert not admissible("go north", FREE).valid
    assert not admissible("   ").valid


def test_raw_takes_the_first_non_empty_line():
    assert raw("\n  go north  \nthen east") == ParsedAction("go north", True)
    assert not raw(" \n ").valid


def test_normalize_action():
    assert normalize_action("  `Go  North.` ") == "go north"
    assert normalize_action("[up]") == "up"


def test_first_mention_takes_the_earliest_admissible_action_or_number():
    from grove.envs.actions import MentionParams, first_mention_action

    obs = Observation("grid", 0, ("left", "down", "right", "up"))
    p = MentionParams()
    assert first_mention_action("I would go Right, then up", obs, p).action == "right"
    assert first_mention_action("Answer:\n2\n3", obs, p).action == "down"
    assert first_mention_action("<action>up</action> but left", obs, p).action == "up"
    assert first_mention_action("go 9 steps", obs, p).valid is False  # 9 is not a listed number
    assert first_mention_action("upright", obs, p).valid is False  # whole words only
    assert first_mention_action("2 left", obs, MentionParams(allow_number=False)).action == "left"
    assert first_mention_action("left", Observation("x", 0, None), p).valid is False
