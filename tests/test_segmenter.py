from __future__ import annotations

import pytest

from voicews.text.segmenter import (
    SPOKEN_EXTRA,
    Boundary,
    Fit,
    Segment,
    Segmenter,
    SegmenterConfig,
    Urgency,
    _classify,
    spoken_length,
)
from voicews.text.urls import speakable


def feed_all(seg: Segmenter, *deltas: str) -> None:
    for d in deltas:
        seg.feed(d)


def drain(seg: Segmenter, urgency: Urgency = Urgency.RELAXED) -> list[str]:
    out = []
    while (s := seg.next_segment(urgency)) is not None:
        out.append(s.text)
    return out


def test_first_segment_cuts_at_first_clause_before_next_token() -> None:
    seg = Segmenter()
    feed_all(seg, "Hel", "lo the", "re")
    assert seg.next_segment(Urgency.FIRST) is None  # "there" may still grow
    seg.feed(",")
    first = seg.next_segment(Urgency.FIRST)
    assert first is not None
    assert (first.text, first.boundary) == ("Hello there,", Boundary.CLAUSE)


@pytest.mark.parametrize(
    ("deltas", "first"),
    [
        (("Of", " cou", "rse", "."), "Of course."),
        (("Sure", " thing", "?"), "Sure thing?"),
        (("\u201cWell", "!"), "\u201cWell!"),
        (("Dr", "."), None),  # an abbreviation: "Dr. Smith"
        # "3." may be "3.5", and "was" and "at" lead into what follows: up to "gate".
        (("I", " was", " at", " gate", " 3", "."), "I was at gate"),
        (("I", " mean", " e.g", "."), "I mean"),
    ],
)
def test_a_first_segment_takes_a_sentence_end_before_the_next_token_confirms_it(
    deltas: tuple[str, ...], first: str | None
) -> None:
    seg = Segmenter()
    feed_all(seg, *deltas)
    got = seg.next_segment(Urgency.FIRST)
    assert (got.text if got else None) == first


def test_a_later_segment_waits_for_the_token_after_a_sentence_end() -> None:
    seg = Segmenter()
    feed_all(seg, "Sure, ", "that is fine", ".")
    assert seg.next_segment(Urgency.FIRST) == Segment("Sure,", Boundary.CLAUSE)
    assert seg.next_segment(Urgency.RELAXED) is None  # "fine." may still become "fine..."
    seg.feed(".. I think")
    got = seg.next_segment(Urgency.RELAXED)
    assert got is not None and got.text == "that is fine..."


def test_punctuation_is_never_a_piece_alone() -> None:
    """An ellipsis' rest after a first segment cut early ("Well." then "..") goes with the
    words after it, not to the engine alone."""
    seg = Segmenter()
    feed_all(seg, "Well", ".")
    assert seg.next_segment(Urgency.FIRST) == Segment("Well.", Boundary.SENTENCE)
    feed_all(seg, "..", " I", " think", " so.", " And")
    assert drain(seg) == [".. I think so."]
    seg.feed(" \u2014")
    seg.close()
    assert drain(seg) == ["And \u2014"]


def test_first_segment_after_a_few_words_without_punctuation() -> None:
    seg = Segmenter(SegmenterConfig(first_words=3))
    feed_all(seg, "so what we", " want to do")
    first = seg.next_segment(Urgency.FIRST)
    assert first is not None
    # Three words, but not "so what we": a subject pronoun is heard as leading into its verb.
    assert (first.text, first.boundary) == ("so what we want", Boundary.WORD)
    assert seg.next_segment(Urgency.RELAXED) is None


def test_a_first_segment_holds_at_least_what_it_is_asked_to() -> None:
    """A loaded worker: the first segment waits for text enough to hear while the next waits."""
    seg = Segmenter()
    seg.feed("Sure, I can help with")
    assert seg.next_segment(Urgency.FIRST, first_chars=20) is None  # "Sure," is too little
    seg.feed(" that")
    # Never "help with": a preposition is heard as the start of what follows.
    assert seg.next_segment(Urgency.FIRST, first_chars=20) is None
    seg.feed(" today")
    # Nor "with that": "that" is heard as leading on ("that the"); "today" may still grow.
    assert seg.next_segment(Urgency.FIRST, first_chars=20) is None
    seg.feed(" for")
    got = seg.next_segment(Urgency.FIRST, first_chars=20)
    assert got is not None and (got.text, got.boundary) == (
        "Sure, I can help with that today",
        Boundary.WORD,
    )
    short = Segmenter()
    short.feed("Hi.")
    short.close()  # all there will be: spoken however short
    got = short.next_segment(Urgency.FIRST, first_chars=20)
    assert got is not None and got.text == "Hi."


def test_relaxed_waits_for_sentence_end() -> None:
    seg = Segmenter()
    seg.feed("It is sunny, warm and")
    assert seg.next_segment(Urgency.RELAXED) is None
    seg.feed(" bright. Tomorrow")
    got = seg.next_segment(Urgency.RELAXED)
    assert got is not None and got.text == "It is sunny, warm and bright."
    assert got.boundary is Boundary.SENTENCE
    assert seg.next_segment(Urgency.RELAXED) is None


def test_urgent_cuts_at_clauses_and_critical_at_words() -> None:
    seg = Segmenter()
    seg.feed("It is sunny, warm and bri")
    got = seg.next_segment(Urgency.URGENT)
    assert got is not None and got.text == "It is sunny,"
    seg.feed("ght in the")
    assert seg.next_segment(Urgency.URGENT) is None  # only word ends: wait for more
    got = seg.next_segment(Urgency.CRITICAL)
    # Before the phrase "in the ...", never after its preposition.
    assert got is not None and (got.text, got.boundary) == ("warm and bright", Boundary.WORD)


def test_a_first_segment_never_runs_past_a_sentence_end() -> None:
    """However much a loaded worker wants it to hold, not "fit. The": the engine stops at
    the sentence anyway, and a word cut after it is heard."""
    seg = Segmenter()
    seg.feed("Okay, I found two flights that fit. The first")
    got = seg.next_segment(Urgency.FIRST, first_chars=40)
    assert got is not None and got.text == "Okay, I found two flights that fit."


def test_a_fitted_cut_is_the_first_sentence_if_it_fits_else_the_longest_clause_that_does() -> None:
    text = "It is sunny, warm and bright. Tomorrow"  # the sentence is 29 characters
    seg = Segmenter()
    seg.feed(text)
    got = seg.next_segment(Urgency.URGENT, fit=Fit(most=40, least=5))
    assert got is not None and got.text == "It is sunny, warm and bright."
    seg = Segmenter()
    seg.feed(text)
    got = seg.next_segment(Urgency.URGENT, fit=Fit(most=20, least=5))
    assert got is not None and (got.text, got.boundary) == ("It is sunny,", Boundary.CLAUSE)


def test_a_busy_cap_cuts_a_long_sentence_at_a_phrase_within_it() -> None:
    """A segment is synthesized whole before its first audio: while others wait for the
    worker, a sentence's rest of 100 characters holds a lane too long, so it is said a clause
    at a time; with no phrase of three words within the cap, the sentence stays whole."""
    text = "Bring proof of address, such as a utility bill, and your account number. Then"
    seg = Segmenter()
    seg.feed(text)
    assert seg.next_segment(Urgency.RELAXED, busy_cap=48) is None  # waits for urgency
    got = seg.next_segment(Urgency.URGENT, busy_cap=48)
    assert got is not None and got.text == "Bring proof of address, such as a utility bill,"
    seg = Segmenter()
    seg.feed(text)
    got = seg.next_segment(Urgency.URGENT, fit=Fit(most=200, least=5), busy_cap=48)
    assert got is not None and got.text == "Bring proof of address, such as a utility bill,"
    seg = Segmenter()
    seg.feed(text)
    got = seg.next_segment(Urgency.RELAXED)
    assert got is not None and got.text.endswith("account number.")
    seg = Segmenter()
    seg.feed("Seventeen purple elephants quietly danced. Then")
    got = seg.next_segment(Urgency.RELAXED, busy_cap=20)
    assert got is not None and got.text == "Seventeen purple elephants quietly danced."


def test_spoken_length_counts_digits_and_signs_as_the_words_they_are_read_as() -> None:
    assert spoken_length("Good question.") == 14
    assert spoken_length("#48213") == 6 + 6 * SPOKEN_EXTRA
    assert spoken_length("$312.50, 60%") == 12 + 9 * SPOKEN_EXTRA


def test_fitted_cuts_and_the_next_segments_length_go_by_spoken_length() -> None:
    seg = Segmenter(SegmenterConfig(max_chars=40))
    seg.feed("It is $1,249.99, with tax, and more")
    # "It is $1,249.99," is 16 characters but 16 + 7 * 6 = 58 spoken: it does not fit in 40.
    got = seg.next_segment(Urgency.URGENT, fit=Fit(most=40, least=5))
    assert got is None
    got = seg.next_segment(Urgency.URGENT, fit=Fit(most=58, least=5))
    assert got is not None and got.text == "It is $1,249.99,"
    seg.feed(" words after that, and then some more")
    assert seg.next_spoken == spoken_length("with tax, and more words after that, and")  # the cap


def test_a_critical_fitted_cut_is_the_longest_word_end_that_fits() -> None:
    seg = Segmenter()
    seg.feed("I moved your meeting to three in the afternoon and")
    fit = Fit(most=20, least=5)
    assert seg.next_segment(Urgency.URGENT, fit=fit) is None  # no clause: wait for critical
    got = seg.next_segment(Urgency.CRITICAL, fit=fit)
    assert got is not None and (got.text, got.boundary) == ("I moved your meeting", Boundary.WORD)


@pytest.mark.parametrize(
    ("text", "most", "cut"),
    [
        ("I found three hotels near the beach, and", 25, "I found three hotels"),  # not "near"
        ("Tickets are twelve dollars, and", 30, "Tickets are twelve dollars,"),  # not "twelve"
        ("The driver should bring it over today, so", 18, "The driver"),  # not "should"
        ("Okay I\u2019m checking it now, and", 20, "Okay I\u2019m checking"),  # curly or not
        ("Your new password needs twelve characters, and", 20, "Your new password"),  # not "new"
        # Nothing fits ending where a phrase may: after an auxiliary or a number word, not late.
        ("Tickets are twelve dollars, and", 20, "Tickets are twelve"),
    ],
)
def test_a_critical_word_cut_falls_before_a_word_that_leads_into_the_next(
    text: str, most: int, cut: str
) -> None:
    """Determiners, prepositions, auxiliaries, subject pronouns, number words and adjectives
    that come before their noun are heard as the start of what follows: the cut falls before
    them, not between them and their head, wherever such a piece fits."""
    seg = Segmenter()
    seg.feed(text)
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=most, least=1))
    assert got is not None and got.text == cut


def test_a_critical_cut_with_no_other_word_end_in_hand_splits_a_phrase_rather_than_wait() -> None:
    seg = Segmenter()
    seg.feed("Here are your opt")  # "options:" still coming, and the listener about to run dry
    assert seg.next_segment(Urgency.URGENT, fit=Fit(most=20, least=1)) is None
    # An auxiliary's end before a determiner's: "your options" stays whole.
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=20, least=1, lone=False))
    assert got is not None and (got.text, got.boundary) == ("Here are", Boundary.WORD)
    seg.feed("ions: the")
    assert seg.next_segment(Urgency.CRITICAL, fit=Fit(most=20, least=1)) == Segment(
        "your options:", Boundary.CLAUSE
    )
    again = Segmenter()
    again.feed("In the opt")  # nothing but a determiner's end in hand
    got = again.next_segment(Urgency.CRITICAL, fit=Fit(most=20, least=1, lone=False))
    assert got is not None and got.text == "In the"


def test_a_critical_cut_ends_on_a_word_that_leads_on_rather_than_leave_one_alone() -> None:
    seg = Segmenter()
    seg.feed("check that for yo")  # "check" alone, or "check that": the pair
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=12, least=1))
    assert got is not None and got.text == "check that"


def test_a_critical_pair_may_overrun_the_fit_by_the_slack_rather_than_leave_a_word_alone() -> None:
    """Alone at 10 tokens a second, "Hmm, | let me | check | that for you.": the pair was 4
    characters over the fit (16 ms of Piper's compute, out of the critical margin)."""
    for slack, cut in ((12, "check that"), (2, "check")):
        seg = Segmenter()
        seg.feed("check that for you.")
        got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=6, least=1, slack=slack))
        assert got is not None and got.text == cut
    seg = Segmenter()
    seg.feed("password needs at least")  # the lone word itself overruns: the pair's excess counts
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=3, least=1, lone=False))
    assert got is not None and got.text == "password needs"


def test_a_busy_worker_lets_a_critical_cut_end_after_a_word_that_leads_on() -> None:
    """Segments wait for the worker: the longest piece that fits, ending after an auxiliary
    too (the longer pieces a phrase needs would take lanes from the other listeners), but
    never after a determiner or preposition."""
    calm, busy = Segmenter(), Segmenter()
    for seg in (calm, busy):
        seg.feed("The driver should bring it over today.")
    got = calm.next_segment(Urgency.CRITICAL, fit=Fit(most=22, least=1))
    assert got is not None and got.text == "The driver"
    got = busy.next_segment(Urgency.CRITICAL, fit=Fit(most=22, least=1, split=True))
    assert got is not None and got.text == "The driver should"
    # Not between a determiner and its noun where a piece ending otherwise fits ("It looks
    # like the | 2:45 flight" in a burst of 16).
    phrase = Segmenter()
    phrase.feed("It looks like the 2:45 flight to Denver")
    got = phrase.next_segment(Urgency.CRITICAL, fit=Fit(most=18, least=1, split=True))
    assert got is not None and got.text == "It looks"
    # Where only a split would fit, the phrase goes whole: one break, a little later.
    got = phrase.next_segment(Urgency.CRITICAL, fit=Fit(most=8, least=1, split=True))
    assert got is not None and got.text == "like the 2:45 flight"


def test_busy_a_cut_that_cannot_spare_the_stall_does_not_split_a_phrase_for_it() -> None:
    # Nothing fits (the listener stalls however the text is cut): a determiner end would
    # add a break to the silence and gain nothing ("Okay. Preheat the | oven" in a burst).
    verb = Segmenter()
    verb.feed("Preheat the oven")
    got = verb.next_segment(Urgency.CRITICAL, fit=Fit(most=0, least=4, split=True))
    assert got is not None and got.text == "Preheat"
    # Nor a sentence's last word paired with the next sentence's first ("see. The | next").
    sentence = Segmenter()
    sentence.feed("see. The next")
    got = sentence.next_segment(Urgency.CRITICAL, fit=Fit(most=0, least=8, split=True))
    assert got is not None and got.text == "see."


def test_after_a_word_that_leads_on_a_phrase_starts_at_its_determiner() -> None:
    # A busy cut after an auxiliary goes before its determiner ("We have | the 2:45"), which
    # starts a phrase there, rather than further on at a word ("We have the 2:45 flight").
    seg = Segmenter()
    seg.feed("We have the 2:45 flight to Denver")
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=20, least=5, split=True))
    assert got is not None and got.text == "We have"
    # Not after a preposition: that splits it from its noun phrase, which goes whole.
    seg = Segmenter()
    seg.feed("It looks like the 2:45 flight to Denver")
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=20, least=9, split=True))
    assert got is not None and got.text == "It looks like the 2:45 flight"
    # After any other word a determiner is no such place: the longer piece is taken.
    calm = Segmenter()
    calm.feed("I checked your account today and the order")
    got = calm.next_segment(Urgency.CRITICAL, fit=Fit(most=26, least=1))
    assert got is not None and got.text == "I checked your account"


def test_a_piece_too_short_to_gain_ground_is_not_cut_and_a_stall_takes_the_shortest_that_does() -> (
    None
):
    seg = Segmenter()
    seg.feed("Hi, I moved your meeting to three")
    fit = Fit(most=10, least=6)  # "Hi," fits but gives less audio than it costs
    assert seg.next_segment(Urgency.URGENT, fit=fit) is None
    # Critical, and nothing both fits and gains ground: the listener stalls however the text
    # is cut; the shortest piece that gains ground makes the stall the shortest.
    got = seg.next_segment(Urgency.CRITICAL, fit=fit)
    assert got is not None and got.text == "Hi, I moved"


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("Dr. Smith will see you.", "Dr. Smith"),
        ("Pi is 3.14159 roughly.", "3.14159"),
        ("It costs 1,000 dollars.", "1,000"),
        ("Use fruit, e.g. apples.", "e.g. apples"),
        ("Go to https://example.com/a?b=1, then stop.", "https://example.com/a?b=1,"),
        ("Mail me at someone@example.com please.", "someone@example.com"),
        ("The U.S. team won.", "U.S. team"),
        ("J. R. Tolkien wrote it.", "J. R. Tolkien"),
        ("It ships Mon. and arrives Wed.", "Mon. and"),
        ("Meet Mr. Chen at 3 p.m. today.", "3 p.m."),
        ("It is 18 degrees now.", "18 degrees"),
    ],
)
def test_never_cuts_inside_numbers_abbreviations_or_urls(text: str, span: str) -> None:
    """Split the text into deltas at every point and ask for segments at every chance."""
    for split in range(1, len(text)):
        seg = Segmenter(SegmenterConfig(first_words=1))
        pieces: list[str] = []
        for delta in (text[:split], text[split:]):
            seg.feed(delta)
            while (s := seg.next_segment(Urgency.CRITICAL)) is not None:
                pieces.append(s.text)
        seg.close()
        pieces += drain(seg)
        assert " ".join(pieces) == text
        assert any(span in piece for piece in pieces), (split, pieces)


def test_protected_spans_stay_whole_in_small_deltas() -> None:
    text = "Dr. Smith paid $3.14 for e.g. apples at example.com/shop, twice."
    for step in range(1, 6):
        seg = Segmenter(SegmenterConfig(first_words=1))
        pieces: list[str] = []
        for i in range(0, len(text), step):
            seg.feed(text[i : i + step])
            while (s := seg.next_segment(Urgency.CRITICAL)) is not None:
                pieces.append(s.text)
        seg.close()
        pieces += drain(seg)
        assert " ".join(pieces) == text
        for span in ("Dr. Smith", "$3.14", "e.g. apples", "example.com/shop,"):
            assert any(span in p for p in pieces), (span, pieces)


def test_close_makes_the_end_a_sentence_boundary() -> None:
    seg = Segmenter()
    seg.feed("no punctuation here")
    assert seg.next_segment(Urgency.RELAXED) is None
    seg.close()
    got = seg.next_segment(Urgency.RELAXED)
    assert got is not None
    assert (got.text, got.boundary) == ("no punctuation here", Boundary.SENTENCE)
    assert not seg.has_text


def test_an_idle_compute_takes_a_clause_of_a_few_words_before_its_sentence_ends() -> None:
    """The compute idle, the listener with audio in hand: a clause goes now, so the sentence
    still arriving when the text ends is one clause; a clause too short to be worth an
    inference of its own waits, as a relaxed cut does."""
    seg = Segmenter()
    seg.feed("Sure, we can do")
    assert seg.next_segment(Urgency.IDLE) is None  # "Sure," is one word
    seg.feed(" that, and I will open a ticket ")
    assert seg.next_segment(Urgency.RELAXED) is None  # no sentence end yet
    got = seg.next_segment(Urgency.IDLE)
    assert got is not None and (got.text, got.boundary) == (
        "Sure, we can do that,",
        Boundary.CLAUSE,
    )
    seg.feed("right away. Thanks")
    got = seg.next_segment(Urgency.IDLE)
    assert got is not None and got.text == "and I will open a ticket right away."
    assert seg.next_segment(Urgency.IDLE) is None


def test_an_idle_clause_cut_waits_for_a_word_after_it() -> None:
    """A clause cut mid-sentence is said with the next word and cut off there, so it ends as
    its sentence goes on (``SynthesisOptions.then``): cut while the compute is idle and nothing
    follows it in hand, it ended as a statement does (alone at 5 tokens a second, 11 of 30 such
    ends in the model). It waits for the word, while there is audio in hand; urgent, it goes."""
    seg = Segmenter()
    seg.feed("If you want the quickest route,")
    assert seg.next_segment(Urgency.IDLE) is None
    assert seg.next_segment(Urgency.URGENT) == Segment(
        "If you want the quickest route,", Boundary.CLAUSE
    )
    seg.feed(" take the highway; if")
    assert seg.next_segment(Urgency.IDLE) is None  # "take the highway;" is three words
    seg.feed(" you would rather avoid tolls, the")
    got = seg.next_segment(Urgency.IDLE)
    assert got is not None and got.text == "take the highway; if you would rather avoid tolls,"
    assert seg.next_word == "the"
    seg.feed(" coastal road,")
    seg.close()  # no word comes after the text's end
    assert seg.next_segment(Urgency.IDLE) == Segment("the coastal road,", Boundary.SENTENCE)


def test_a_trial_first_segment_is_judged_by_the_next_token() -> None:
    seg = Segmenter()
    seg.feed("We found")
    trial = seg.trial_first()
    assert trial == Segment("We found", Boundary.WORD)
    assert seg.next_segment(Urgency.FIRST) is None  # not confirmed: a trial only
    assert seg.judge_trial(trial) is None  # nothing new yet
    seg.feed(" it")
    assert seg.judge_trial(trial) is True
    seg.feed(" for you.")
    seg.close()
    assert drain(seg) == ["it for you."]
    leaning = Segmenter()
    leaning.feed("In the")
    assert leaning.trial_first() is None  # its noun is still coming
    adjective = Segmenter()
    adjective.feed("Your new")  # a first segment may end where a later one may not
    assert adjective.trial_first() == Segment("Your new", Boundary.WORD)
    grown = Segmenter()
    grown.feed("I see")
    trial = grown.trial_first()
    assert trial is not None and grown.trial_first(first_chars=6) is None  # too short
    grown.feed("m")
    assert grown.judge_trial(trial) is False
    assert grown.next_segment(Urgency.FIRST) is None  # all of it left for the next cut
    grown.feed(" fine")
    got = grown.next_segment(Urgency.FIRST)
    assert got is not None and got.text == "I seem"
    leaning = Segmenter()
    leaning.feed("I have")
    assert leaning.trial_first() is None  # "have" leads into its verb: no phrase yet


def test_flush_takes_everything_pending_even_a_partial_word() -> None:
    seg = Segmenter()
    seg.feed("Let me check the weath")
    got = seg.next_segment(Urgency.FLUSH)
    assert got is not None and got.text == "Let me check the weath"


def test_max_chars_caps_segments() -> None:
    seg = Segmenter(SegmenterConfig(max_chars=40))
    seg.feed("one two three four five six seven eight nine ten eleven twelve thirteen ")
    pieces = drain(seg)
    assert pieces and all(len(p) <= 40 for p in pieces)
    seg.close()
    assert " ".join(pieces + drain(seg)) == (
        "one two three four five six seven eight nine ten eleven twelve thirteen"
    )


def test_newline_is_a_sentence_boundary() -> None:
    seg = Segmenter()
    seg.feed("Shopping list\n- eggs")
    got = seg.next_segment(Urgency.RELAXED)
    assert got is not None and (got.text, got.boundary) == ("Shopping list", Boundary.SENTENCE)


def test_whitespace_only_yields_nothing() -> None:
    seg = Segmenter()
    seg.feed("   \n ")
    seg.close()
    assert seg.next_segment(Urgency.FLUSH) is None
    assert seg.pending_chars == 0


def test_a_token_longer_than_the_cap_is_cut_into_pieces() -> None:
    """A 4,000-character word or base64 must not become one segment (one huge inference)."""
    seg = Segmenter(SegmenterConfig(max_chars=40))
    word = "x" * 100 + "."
    seg.feed(f"{word} Then more.")
    first = seg.next_segment(Urgency.FIRST)
    assert first is not None and len(first.text) == 40
    seg.close()
    pieces = [first.text, *drain(seg)]
    assert all(len(p) <= 40 for p in pieces)
    assert "".join(pieces[:-1]) == word and pieces[-1] == "Then more."


def test_a_long_token_is_cut_after_punctuation_where_it_has_some() -> None:
    seg = Segmenter(SegmenterConfig(max_chars=40))
    seg.feed("part-" * 20)
    got = seg.next_segment(Urgency.CRITICAL)
    assert got is not None and got.text == "part-" * 8


def test_a_url_is_never_split_however_long() -> None:
    url = "https://example.com/" + "path/" * 60 + "?q=1"
    text = f"Open {url} now."
    for step in (1, 7, 50):
        seg = Segmenter(SegmenterConfig(first_words=1, max_chars=40))
        pieces: list[str] = []
        for i in range(0, len(text), step):
            seg.feed(text[i : i + step])
            while (s := seg.next_segment(Urgency.CRITICAL)) is not None:
                pieces.append(s.text)
        seg.close()
        pieces += drain(seg)
        assert pieces == ["Open", url, "now."], step


def test_a_url_still_arriving_is_flushed_when_the_text_pauses() -> None:
    seg = Segmenter(SegmenterConfig(max_chars=40))
    seg.feed("https://example.com/" + "a" * 60)
    assert seg.next_segment(Urgency.CRITICAL) is None  # it may go on
    got = seg.next_segment(Urgency.FLUSH)
    assert got is not None and got.text == "https://example.com/" + "a" * 60


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        (
            "See https://docs.example.com/guide/install?ref=abc#top, then restart.",
            "See docs.example.com/guide/install, then restart.",
        ),
        ("Visit www.example.com.", "Visit example.com."),
        ("(https://user:pw@host.example:8080/a/)", "(host.example:8080/a)"),
        (
            "https://example.com/" + "abcdefgh/" * 300 + " ok",
            "example.com/abcdefgh/abcdefgh/abcdefgh ok",
        ),
        ("no urls at all, e.g. 3.14", "no urls at all, e.g. 3.14"),
    ],
)
def test_urls_are_read_as_host_and_path_at_most_url_chars(text: str, spoken: str) -> None:
    assert speakable(text) == spoken
    assert len(speakable(text).split()) == len(text.split())  # word timings keep their places


def test_a_word_cut_never_ends_on_an_article_a_preposition_or_a_conjunction() -> None:
    """Issue 28: "the", "of", "and" are heard as the start of what follows; cut before a
    phrase ("with", "because") where a word cut must be made, and never try "In the"."""
    seg = Segmenter()
    seg.feed("It goes to the station of the city and then")
    got = seg.next_segment(Urgency.CRITICAL)
    assert got is not None and got.text == "It goes to the station of the city"
    assert _classify("the") is None and _classify("With") is None and _classify("city") is not None
    seg = Segmenter()
    seg.feed("In the")
    assert seg.trial_first() is None


def test_a_critical_cut_waits_for_the_next_word_rather_than_say_one_alone() -> None:
    seg = Segmenter()
    seg.feed("went thro")
    fit = Fit(most=40, least=1, lone=False)
    assert seg.next_segment(Urgency.CRITICAL, fit=fit) is None
    seg.feed("ugh today ")
    got = seg.next_segment(Urgency.CRITICAL, fit=fit)
    assert got == Segment("went through today", Boundary.WORD)
    seg.feed("morning and ")
    lone = Fit(most=40, least=1, lone=True)
    assert seg.next_segment(Urgency.CRITICAL, fit=lone) == Segment("morning", Boundary.WORD)


def test_a_closed_turns_last_word_is_said_though_a_critical_cut_would_wait() -> None:
    """No next word comes after the end of the text: waiting for one was a turn that never
    ended (Kokoro's one-word first segment, then 'there.' left, critical, kept for ever)."""
    seg = Segmenter()
    seg.feed("there.")
    seg.close()
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=0, least=2, lone=False))
    assert got == Segment("there.", Boundary.SENTENCE)


def test_a_critical_cut_takes_the_next_word_in_hand_rather_than_leave_one_alone() -> None:
    seg = Segmenter()
    seg.feed("not blocked.")
    seg.close()
    got = seg.next_segment(Urgency.CRITICAL, fit=Fit(most=4, least=1, lone=True))
    assert got == Segment("not blocked.", Boundary.SENTENCE)


def test_a_first_segment_one_word_short_of_a_sentence_end_in_hand_takes_it() -> None:
    """A first segment held for a lead ends where the lead is met; a sentence end one word
    later, in hand, is taken too rather than left as a segment of one word."""
    seg = Segmenter()
    seg.feed("Your package is at the depot right now. The dri")
    got = seg.next_segment(Urgency.FIRST, first_chars=30)
    assert got == Segment("Your package is at the depot right now.", Boundary.SENTENCE)


def test_partial_chars_is_the_word_still_growing_at_the_end() -> None:
    seg = Segmenter()
    assert seg.partial_chars == 0
    seg.feed("password nee")
    assert seg.partial_chars == 3
    seg.feed("ds ")
    assert seg.partial_chars == 0  # whitespace follows it: a whole word
    seg.feed("at")
    seg.close()
    assert seg.partial_chars == 0  # the text ended: nothing grows
