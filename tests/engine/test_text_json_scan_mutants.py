"""engine/text/json_scan.py step by step: what each piece gives (the value's part and
the characters read), for objects, arrays, top-level strings and scalars, whitespace
before a value, escapes and brackets inside strings, and nothing read once done."""

from __future__ import annotations

from engine.text.json_scan import JsonValueScanner, ScanStep


def steps(*pieces: str) -> tuple[list[ScanStep], JsonValueScanner]:
    scanner = JsonValueScanner()
    return [scanner.take(p) for p in pieces], scanner


def test_a_fresh_scanner_has_not_started():
    scanner = JsonValueScanner()
    assert (scanner.started, scanner.done) == (False, False)
    assert scanner.take("") == ScanStep("", 0) and not scanner.started


def test_leading_whitespace_is_read_but_not_part_of_the_value():
    (step,), scanner = steps("  \n{}")
    assert step == ScanStep("{}", 5) and scanner.started and scanner.done
    (only_space,), scanner = steps("   ")
    assert only_space == ScanStep("", 3) and not scanner.started and not scanner.done


def test_an_object_ends_at_its_closing_brace_and_nothing_after_is_read():
    (step,), scanner = steps('{"a": [1, {"b": 2}]} tail')
    assert step == ScanStep('{"a": [1, {"b": 2}]}', 20) and scanner.done
    assert scanner.take("more") == ScanStep("", 0)


def test_an_array_at_the_top():
    (step,), _ = steps("[[1], 2]x")
    assert step == ScanStep("[[1], 2]", 8)


def test_an_object_across_pieces():
    (a, b, c), scanner = steps('{"a"', ": {", "}}!")
    assert (a, b, c) == (ScanStep('{"a"', 4), ScanStep(": {", 3), ScanStep("}}", 2))
    assert scanner.done


def test_brackets_and_quotes_inside_strings_do_not_count():
    (step,), _ = steps('{"a": "}]{[\\"x\\\\"} after')
    assert step == ScanStep('{"a": "}]{[\\"x\\\\"}', 18)


def test_an_escaped_backslash_before_a_quote_ends_the_string():
    (step,), scanner = steps('"a\\\\" rest')
    assert step == ScanStep('"a\\\\"', 5) and scanner.done


def test_a_top_level_string_ends_at_its_closing_quote():
    (a, b), scanner = steps('"ab', 'c" x')
    assert (a, b) == (ScanStep('"ab', 3), ScanStep('c"', 2)) and scanner.done


def test_a_string_inside_an_object_does_not_end_the_value():
    (step,), scanner = steps('{"k"')
    assert step == ScanStep('{"k"', 4) and not scanner.done


def test_a_scalar_ends_before_the_first_character_that_cannot_continue_it():
    for text, value in (("12,", "12"), ("true}", "true"), ("null]", "null"), ("-3.5 ", "-3.5")):
        (step,), scanner = steps(text)
        assert step == ScanStep(value, len(value)) and scanner.done, text
    (a, b), scanner = steps("12", "3")
    assert (a, b) == (ScanStep("12", 2), ScanStep("3", 1)) and not scanner.done


def test_a_scalar_stopped_by_whitespace_reads_no_more():
    (a, b), scanner = steps(" 7\n", "8")
    assert (a, b) == (ScanStep("7", 2), ScanStep("", 0)) and scanner.done


def test_the_scanner_delimits_without_validating():
    # json.loads judges the value; the scanner only finds where it ends
    for text, value in (("Xa,", "Xa"), ("nullX,", "nullX"), ("1e5x}", "1e5x"), ("{X} t", "{X}"), ("[X] t", "[X]")):
        (step,), scanner = steps(text)
        assert step == ScanStep(value, len(value)) and scanner.done, text


def test_a_top_level_string_holding_spaces_and_commas_is_one_value():
    (step,), scanner = steps('"a b, c" d')
    assert step == ScanStep('"a b, c"', 8) and scanner.done


def test_an_empty_string_ends_at_its_second_quote():
    (step,), scanner = steps('"" x')
    assert step == ScanStep('""', 2) and scanner.done
    (step,), scanner = steps('{"": ""} x')
    assert step == ScanStep('{"": ""}', 8) and scanner.done
