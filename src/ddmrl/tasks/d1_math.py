"""d1's MATH answer helpers (its ``eval/parser_helper.py``, after Hendrycks et al.'s MATH code), rule for rule: the
last box of a text, its content, the answer normaliser and the equivalence test. d1's MATH500 parser
(:mod:`ddmrl.tasks.d1_eval`) and its MATH training reward (:mod:`ddmrl.tasks.d1_scoring`) both use them; the rules
are restated, not copied, and keep d1's quirks (see :mod:`ddmrl.tasks.d1_eval`)."""

from __future__ import annotations

__all__ = ["is_equiv", "last_boxed_only_string", "remove_boxed", "strip_string"]


def last_boxed_only_string(text: str) -> str | None:
    """d1's variant of Hendrycks' ``last_boxed_only_string``.

    If ``"\\boxed "`` (with a space) occurs anywhere, returns ``"\\boxed "`` plus the text after its *last*
    occurrence up to the next ``$``. Otherwise finds the last ``\\boxed`` (else the last ``\\fbox``) and returns
    it through the brace that brings the count of open braces back to zero, or ``None`` when that never happens.
    With neither ``\\boxed`` nor ``\\fbox`` d1 returns the *whole text* (Hendrycks returns ``None``).

    >>> last_boxed_only_string("so \\\\boxed{\\\\frac{1}{2}} done")
    '\\\\boxed{\\\\frac{1}{2}}'
    >>> last_boxed_only_string("$\\\\boxed 5$ and \\\\boxed{6}")
    '\\\\boxed 5'
    >>> last_boxed_only_string("\\\\boxed{5") is None, last_boxed_only_string("no box")
    (True, 'no box')
    """
    idx = text.rfind("\\boxed")
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return text
    depth = 0
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[idx : i + 1]
    return None


def remove_boxed(boxed: str) -> str:
    """d1's ``remove_boxed``: drop a leading ``\\boxed `` or a ``\\boxed{...}`` wrapper; anything else unchanged.

    >>> remove_boxed("\\\\boxed{5}"), remove_boxed("\\\\boxed 5"), remove_boxed("\\\\fbox{5}")
    ('5', '5', '\\\\fbox{5}')
    """
    if "\\boxed " in boxed:
        if not boxed.startswith("\\boxed "):
            raise ValueError(f"malformed boxed string: {boxed!r}")  # d1: AssertionError (never reached)
        return boxed[len("\\boxed ") :]
    if boxed.startswith("\\boxed{") and boxed.endswith("}"):
        return boxed[len("\\boxed{") : -1]
    return boxed


def _fix_fracs(string: str) -> str:
    substrs = string.split("\\frac")
    new_str = substrs[0]
    for substr in substrs[1:]:
        new_str += "\\frac"
        if substr[0] == "{":  # IndexError on an empty piece, as in d1 (is_equiv then compares raw strings)
            new_str += substr
            continue
        if len(substr) < 2:
            return string
        a, b = substr[0], substr[1]
        if b != "{":
            new_str += "{" + a + "}{" + b + "}" + substr[2:]
        else:
            new_str += "{" + a + "}" + b + substr[2:]
    return new_str


def _fix_a_slash_b(string: str) -> str:
    parts = string.split("/")
    if len(parts) != 2:
        return string
    a, b = int(parts[0]), int(parts[1])  # ValueError for non-integers is NOT caught, as in d1
    if string != f"{a}/{b}":
        return string
    return "\\frac{" + str(a) + "}{" + str(b) + "}"


def _remove_right_units(string: str) -> str:
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        if len(splits) != 2:
            raise ValueError("more than one '\\text{ ' unit")  # d1: AssertionError
        return splits[0]
    return string


def _fix_sqrt(string: str) -> str:
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split[0] != "{":  # IndexError when "\sqrt" ends the string, as in d1
            new_string += "\\sqrt{" + split[0] + "}" + split[1:]
        else:
            new_string += "\\sqrt" + split
    return new_string


def strip_string(string: str) -> str:
    """d1's (Hendrycks') answer normaliser; raises where d1's raises (see :func:`is_equiv`).

    >>> strip_string("\\\\dfrac{1}{2}"), strip_string("0.5"), strip_string("1/2"), strip_string("x = 3")
    ('\\\\frac{1}{2}', '\\\\frac{1}{2}', '\\\\frac{1}{2}', '3')
    >>> strip_string("\\\\left( 3, \\\\sqrt2 \\\\right)"), strip_string("10\\\\%"), strip_string(".25")
    ('(3,\\\\sqrt{2})', '10', '0.25')
    """
    string = string.replace("\n", "")
    string = string.replace("\\!", "")
    string = string.replace("\\\\", "\\")
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "")  # d1 does this twice ("\\%" and "\%" are the same string)
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    sides = string.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        string = sides[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    return _fix_a_slash_b(string)


def is_equiv(prediction: str | float | None, gold: str | float | None) -> bool:
    """d1's ``is_equiv``: a float on either side compares numerically (``< 1e-6``); otherwise the normalised
    strings must be equal, and if normalising either side raises, the raw strings must be equal.

    >>> is_equiv("\\\\frac12", "\\\\dfrac{1}{2}"), is_equiv("x/2", "\\\\frac{x}{2}"), is_equiv("x/2", "x/2")
    (True, False, True)
    """
    if type(prediction) is float or type(gold) is float:
        try:
            return abs(float(prediction) - float(gold)) < 1e-6  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    if prediction is None and gold is None:
        return True
    if prediction is None or gold is None:
        return False
    try:
        return strip_string(prediction) == strip_string(gold)
    except Exception:  # d1 catches everything the normaliser raises
        return prediction == gold
