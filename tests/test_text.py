"""featurecache.text.first_named: the one way messages name the first few of a list."""

from featurecache.text import first_named


def test_all_items_when_they_fit() -> None:
    assert first_named(["a", "b", "c"], 3) == "a, b, c"
    assert first_named([], 3) == ""


def test_the_rest_is_counted() -> None:
    assert first_named(["a", "b", "c", "d", "e"], 2) == "a, b and 3 more"


def test_a_semicolon_list_keeps_its_punctuation_and_a_noun_follows_more() -> None:
    assert first_named(["x 1", "y 2", "z 3"], 1, "; ") == "x 1; and 2 more"
    assert first_named(iter(["p", "q", "r"]), 2, "; ", noun="residues") == "p; q; and 1 more residues"
