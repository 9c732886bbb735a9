"""A HumanEval-shaped workload: small, distinct function problems with tests.

Each problem is a function with a correct solution and a tests source (several
`assert entry(args) == expected` lines). The expected values are computed once, at import,
by running the correct solution, so the tests always agree with it.

For a benchmark the *candidate* program of a problem stands for a model's completion:
it is the correct solution for most problems, a deterministically chosen wrong one for
about 20% (an off-by-one, a wrong operator, a dropped case... each checked at import to
fail at least one test), and a program that loops forever for two problems (timeout).

    from humaneval_problems import problems, candidate, expected_verdict, workload
    for p in problems():
        candidate(p), p.tests, expected_verdict(p)   # "passed" / "failed" / "timeout"

`workload()` gives plain dicts (id, program, tests, expected) for drivers that run in other
interpreters. Everything here is the standard library only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from textwrap import dedent

WRONG_EVERY = 5
"""One candidate in WRONG_EVERY is wrong (20%)."""
LOOPING = ("gcd", "collatz_steps")
"""Problems whose candidate loops forever (the expected verdict is a timeout)."""


@dataclass(frozen=True)
class Problem:
    id: str
    entry_point: str
    solution: str
    """A correct solution."""
    tests: str
    """Asserts calling the entry point; all pass on `solution`."""
    wrong: str
    """A wrong solution (fails at least one test; never loops)."""
    kind: str
    """What the benchmark's candidate is: "correct", "wrong" or "loop"."""
    looping: str | None = None
    """A candidate that never returns (only for problems in LOOPING)."""


# --- hand-written problems: (name, solution, argument tuples, (text, replacement) for a wrong one)
# The entry point is the function `name` in the solution.

_HAND: list[tuple[str, str, list[tuple], tuple[str, str]]] = [
    # ---- strings
    ("reverse_words", """
        def reverse_words(s):
            return " ".join(reversed(s.split()))
     """, [("hello world",), ("a b c",), ("",), ("one",), ("  spaced   out  ",)],
     ("reversed(s.split())", "s.split()")),
    ("is_palindrome", """
        def is_palindrome(s):
            kept = [c.lower() for c in s if c.isalnum()]
            return kept == kept[::-1]
     """, [("A man, a plan, a canal: Panama",), ("race a car",), ("",), ("No 'x' in Nixon",), ("ab",)],
     ("c.lower() for c in s if c.isalnum()", "c for c in s if c.isalnum()")),
    ("count_vowels", """
        def count_vowels(s):
            return sum(1 for c in s.lower() if c in "aeiou")
     """, [("hello",), ("AEIOU",), ("rhythm",), ("Programming Language",), ("",)],
     ("s.lower()", "s")),
    ("title_case", """
        def title_case(s):
            return " ".join(w[:1].upper() + w[1:].lower() for w in s.split(" "))
     """, [("hello world",), ("hELLO wORLD",), ("a",), ("multiple  spaces here",)],
     ("w[1:].lower()", "w[1:]")),
    ("dedupe_chars", """
        def dedupe_chars(s):
            seen, out = set(), []
            for c in s:
                if c not in seen:
                    seen.add(c)
                    out.append(c)
            return "".join(out)
     """, [("banana",), ("abcabc",), ("",), ("aabbccdd",), ("mississippi",)],
     ("seen.add(c)", "pass")),
    ("rle_encode", """
        def rle_encode(s):
            out, i = [], 0
            while i < len(s):
                j = i
                while j < len(s) and s[j] == s[i]:
                    j += 1
                out.append(f"{s[i]}{j - i}")
                i = j
            return "".join(out)
     """, [("aaabcc",), ("",), ("abc",), ("zzzzzzzzzzzz",), ("aabbaa",)],
     ('f"{s[i]}{j - i}"', 'f"{s[i]}{j - i - 1}"')),
    ("rle_decode", """
        def rle_decode(s):
            out, i = [], 0
            while i < len(s):
                ch = s[i]
                i += 1
                n = 0
                while i < len(s) and s[i].isdigit():
                    n = n * 10 + int(s[i])
                    i += 1
                out.append(ch * n)
            return "".join(out)
     """, [("a3b1c2",), ("",), ("x12",), ("a1b1c1",)],
     ("n = n * 10 + int(s[i])", "n = int(s[i])")),
    ("caesar", """
        def caesar(s, k):
            out = []
            for c in s:
                if c.isupper():
                    out.append(chr((ord(c) - 65 + k) % 26 + 65))
                elif c.islower():
                    out.append(chr((ord(c) - 97 + k) % 26 + 97))
                else:
                    out.append(c)
            return "".join(out)
     """, [("abc", 1), ("xyz", 3), ("Hello, World!", 13), ("abc", -1), ("", 5)],
     ("(ord(c) - 97 + k) % 26", "(ord(c) - 97 + k) % 25")),
    ("is_anagram", """
        def is_anagram(a, b):
            return sorted(a.replace(" ", "").lower()) == sorted(b.replace(" ", "").lower())
     """, [("listen", "silent"), ("Dormitory", "dirty room"), ("abc", "abd"), ("", ""), ("aab", "abb")],
     ("sorted(a.replace", "set(a.replace")),
    ("longest_word", """
        def longest_word(s):
            best = ""
            for w in s.split():
                if len(w) > len(best):
                    best = w
            return best
     """, [("the quick brown fox",), ("a bb cc d",), ("",), ("equal sizes here",)],
     ("len(w) > len(best)", "len(w) >= len(best)")),
    ("char_histogram", """
        def char_histogram(s):
            counts = {}
            for c in s:
                if c != " ":
                    counts[c] = counts.get(c, 0) + 1
            return counts
     """, [("hello world",), ("",), ("aaa",), ("a b a",)],
     ('if c != " ":', "if True:")),
    ("snake_to_camel", """
        def snake_to_camel(s):
            parts = s.split("_")
            return parts[0] + "".join(p.capitalize() for p in parts[1:])
     """, [("hello_world",), ("a_b_c",), ("single",), ("get_http_response",)],
     ("parts[1:]", "parts[2:]")),
    ("camel_to_snake", """
        def camel_to_snake(s):
            out = []
            for c in s:
                if c.isupper():
                    out.append("_" + c.lower())
                else:
                    out.append(c)
            return "".join(out).lstrip("_")
     """, [("helloWorld",), ("HelloWorld",), ("already",), ("getHTTPResponse",)],
     ('.lstrip("_")', "")),
    ("count_overlapping", """
        def count_overlapping(s, sub):
            count = 0
            for i in range(len(s) - len(sub) + 1):
                if s[i:i + len(sub)] == sub:
                    count += 1
            return count
     """, [("aaaa", "aa"), ("abababa", "aba"), ("abc", "d"), ("", "a"), ("aaa", "a")],
     ("range(len(s) - len(sub) + 1)", "range(len(s) - len(sub))")),
    ("strip_vowels", """
        def strip_vowels(s):
            return "".join(c for c in s if c.lower() not in "aeiou")
     """, [("hello",), ("AEIOUxyz",), ("",), ("Programming",)],
     ("c.lower() not in", "c not in")),
    ("alternate_case", """
        def alternate_case(s):
            return "".join(c.upper() if i % 2 == 0 else c.lower() for i, c in enumerate(s))
     """, [("hello",), ("ABCDEF",), ("",), ("a b c",)],
     ("i % 2 == 0", "i % 2 == 1")),
    ("is_pangram", """
        def is_pangram(s):
            return set("abcdefghijklmnopqrstuvwxyz") <= set(s.lower())
     """, [("The quick brown fox jumps over the lazy dog",), ("hello",), ("",), ("Pack my box with five dozen liquor jugs",)],
     ("set(s.lower())", "set(s)")),
    ("first_unique_index", """
        def first_unique_index(s):
            counts = {}
            for c in s:
                counts[c] = counts.get(c, 0) + 1
            for i, c in enumerate(s):
                if counts[c] == 1:
                    return i
            return -1
     """, [("leetcode",), ("loveleetcode",), ("aabb",), ("",), ("z",)],
     ("return -1", "return None")),
    ("compress_spaces", """
        def compress_spaces(s):
            return " ".join(s.split())
     """, [("  a   b  ",), ("no_spaces",), ("",), ("x \\t y",)],
     ('" ".join(s.split())', 's.replace("  ", " ")')),
    ("word_lengths", """
        def word_lengths(s):
            return [len(w) for w in s.split()]
     """, [("the quick brown fox",), ("",), ("a",), ("hello   world",)],
     ("s.split()", 's.split(" ")')),
    ("acronym", """
        def acronym(s):
            return "".join(w[0].upper() for w in s.replace("-", " ").split())
     """, [("portable network graphics",), ("Complementary metal-oxide semiconductor",), ("",), ("as soon as possible",)],
     ('s.replace("-", " ").split()', "s.split()")),
    ("balanced_brackets", """
        def balanced_brackets(s):
            pairs = {")": "(", "]": "[", "}": "{"}
            stack = []
            for c in s:
                if c in "([{":
                    stack.append(c)
                elif c in pairs:
                    if not stack or stack.pop() != pairs[c]:
                        return False
            return not stack
     """, [("([]{})",), ("([)]",), ("((",), ("",), ("a(b)c",), ("}",)],
     ("return not stack", "return True")),
    ("common_prefix", """
        def common_prefix(words):
            if not words:
                return ""
            prefix = words[0]
            for w in words[1:]:
                while not w.startswith(prefix):
                    prefix = prefix[:-1]
            return prefix
     """, [(["flower", "flow", "flight"],), (["dog", "racecar"],), ([],), (["same", "same"],), (["a"],)],
     ("words[1:]", "words[2:]")),
    ("rotate_string", """
        def rotate_string(s, k):
            if not s:
                return s
            k %= len(s)
            return s[-k:] + s[:-k] if k else s
     """, [("abcdef", 2), ("abcdef", 8), ("", 3), ("abc", 0), ("abc", -1)],
     ("k %= len(s)", "k = min(k, len(s))")),
    ("word_counts", """
        def word_counts(s):
            counts = {}
            for w in s.lower().split():
                w = w.strip(".,!?")
                if w:
                    counts[w] = counts.get(w, 0) + 1
            return counts
     """, [("The cat and the hat.",), ("",), ("a a a, b!",), ("Hi hi HI",)],
     ('w.strip(".,!?")', "w")),
    ("mask_digits", """
        def mask_digits(s, keep=4):
            digits = [i for i, c in enumerate(s) if c.isdigit()]
            hidden = set(digits[:-keep] if keep else digits)
            return "".join("#" if i in hidden else c for i, c in enumerate(s))
     """, [("1234-5678-9012",), ("12",), ("no digits",), ("555-1234", 2), ("9876", 0)],
     ("digits[:-keep] if keep else digits", "digits[:-keep]")),
    ("is_isogram", """
        def is_isogram(s):
            letters = [c.lower() for c in s if c.isalpha()]
            return len(letters) == len(set(letters))
     """, [("lumberjacks",), ("isograms",), ("six-year-old",), ("",), ("Alphabet",)],
     ("c.lower() for c in s", "c for c in s")),
    ("reverse_each_word", """
        def reverse_each_word(s):
            return " ".join(w[::-1] for w in s.split(" "))
     """, [("hello world",), ("abc",), ("",), ("a bc def",)],
     ("w[::-1]", "w[:0:-1]")),
    ("to_binary", """
        def to_binary(n):
            if n == 0:
                return "0"
            bits = []
            while n > 0:
                bits.append(str(n % 2))
                n //= 2
            return "".join(reversed(bits))
     """, [(0,), (1,), (5,), (255,), (1024,)],
     ('"".join(reversed(bits))', '"".join(bits)')),
    ("roman_to_int", """
        def roman_to_int(s):
            values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
            total = 0
            for i, c in enumerate(s):
                v = values[c]
                if i + 1 < len(s) and values[s[i + 1]] > v:
                    total -= v
                else:
                    total += v
            return total
     """, [("III",), ("IV",), ("IX",), ("LVIII",), ("MCMXCIV",)],
     ("values[s[i + 1]] > v", "values[s[i + 1]] < v")),
    ("int_to_roman", """
        def int_to_roman(n):
            table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                     (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
            out = []
            for value, sym in table:
                while n >= value:
                    out.append(sym)
                    n -= value
            return "".join(out)
     """, [(3,), (4,), (9,), (58,), (1994,), (3999,)],
     ('(9, "IX"), ', "")),
    # ---- arithmetic
    ("gcd", """
        def gcd(a, b):
            while b:
                a, b = b, a % b
            return abs(a)
     """, [(12, 18), (17, 5), (0, 7), (100, 75), (-12, 8)],
     ("a, b = b, a % b", "a, b = b, a // b")),
    ("lcm", """
        def lcm(a, b):
            if a == 0 or b == 0:
                return 0
            x, y = a, b
            while y:
                x, y = y, x % y
            return abs(a * b) // x
     """, [(4, 6), (21, 6), (0, 5), (7, 13), (12, 12)],
     ("abs(a * b) // x", "abs(a * b) // (x + 1)")),
    ("is_prime", """
        def is_prime(n):
            if n < 2:
                return False
            i = 2
            while i * i <= n:
                if n % i == 0:
                    return False
                i += 1
            return True
     """, [(0,), (1,), (2,), (17,), (21,), (97,), (49,)],
     ("i * i <= n", "i * i < n")),
    ("nth_prime", """
        def nth_prime(k):
            count, n = 0, 1
            while count < k:
                n += 1
                if all(n % d for d in range(2, int(n ** 0.5) + 1)):
                    count += 1
            return n
     """, [(1,), (2,), (6,), (25,), (100,)],
     ("int(n ** 0.5) + 1", "int(n ** 0.5)")),
    ("digit_sum", """
        def digit_sum(n):
            return sum(int(d) for d in str(abs(n)))
     """, [(0,), (123,), (-456,), (99999,)],
     ("str(abs(n))", "str(n).lstrip('-')[1:]")),
    ("digital_root", """
        def digital_root(n):
            while n >= 10:
                n = sum(int(d) for d in str(n))
            return n
     """, [(0,), (16,), (942,), (55,), (132189,), (493193,)],
     ("while n >= 10", "while n > 10")),
    ("factorial", """
        def factorial(n):
            result = 1
            for i in range(2, n + 1):
                result *= i
            return result
     """, [(0,), (1,), (5,), (10,), (20,)],
     ("range(2, n + 1)", "range(2, n)")),
    ("fibonacci", """
        def fibonacci(n):
            a, b = 0, 1
            for _ in range(n):
                a, b = b, a + b
            return a
     """, [(0,), (1,), (2,), (10,), (50,)],
     ("a, b = 0, 1", "a, b = 1, 1")),
    ("collatz_steps", """
        def collatz_steps(n):
            steps = 0
            while n != 1:
                n = n // 2 if n % 2 == 0 else 3 * n + 1
                steps += 1
            return steps
     """, [(1,), (6,), (7,), (27,), (97,)],
     ("steps = 0", "steps = 1")),
    ("is_perfect", """
        def is_perfect(n):
            return n > 1 and sum(d for d in range(1, n) if n % d == 0) == n
     """, [(6,), (28,), (12,), (1,), (496,)],
     ("range(1, n)", "range(1, n + 1)")),
    ("sum_of_divisors", """
        def sum_of_divisors(n):
            total = 0
            d = 1
            while d * d <= n:
                if n % d == 0:
                    total += d
                    if d != n // d:
                        total += n // d
                d += 1
            return total
     """, [(1,), (6,), (12,), (16,), (97,)],
     ("if d != n // d:", "if True:")),
    ("count_primes_below", """
        def count_primes_below(n):
            if n < 3:
                return 0
            sieve = [True] * n
            sieve[0] = sieve[1] = False
            for i in range(2, int(n ** 0.5) + 1):
                if sieve[i]:
                    for j in range(i * i, n, i):
                        sieve[j] = False
            return sum(sieve)
     """, [(0,), (3,), (10,), (100,), (1000,)],
     ("range(i * i, n, i)", "range(i * i + i, n, i)")),
    ("power_mod", """
        def power_mod(base, exp, mod):
            result = 1
            base %= mod
            while exp > 0:
                if exp & 1:
                    result = result * base % mod
                base = base * base % mod
                exp >>= 1
            return result % mod
     """, [(2, 10, 1000), (3, 0, 7), (7, 222, 13), (10, 18, 1_000_000_007), (5, 3, 1)],
     ("if exp & 1:", "if exp & 2:")),
    ("int_sqrt", """
        def int_sqrt(n):
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if mid * mid <= n:
                    lo = mid
                else:
                    hi = mid - 1
            return lo
     """, [(0,), (1,), (15,), (16,), (1_000_000,), (999_999,)],
     ("mid * mid <= n", "mid * mid < n")),
    ("is_armstrong", """
        def is_armstrong(n):
            digits = str(n)
            return sum(int(d) ** len(digits) for d in digits) == n
     """, [(153,), (370,), (9474,), (10,), (0,), (123,)],
     ("int(d) ** len(digits)", "int(d) ** 3")),
    ("reverse_integer", """
        def reverse_integer(n):
            sign = -1 if n < 0 else 1
            return sign * int(str(abs(n))[::-1])
     """, [(123,), (-456,), (120,), (0,), (7,)],
     ("sign * int", "int")),
    ("binomial", """
        def binomial(n, k):
            if k < 0 or k > n:
                return 0
            k = min(k, n - k)
            result = 1
            for i in range(1, k + 1):
                result = result * (n - k + i) // i
            return result
     """, [(5, 2), (10, 0), (10, 10), (20, 7), (3, 5), (52, 5)],
     ("result * (n - k + i) // i", "result * (n - k + i) // (i + 1)")),
    ("sum_squares", """
        def sum_squares(n):
            return sum(i * i for i in range(1, n + 1))
     """, [(0,), (1,), (3,), (10,), (100,)],
     ("range(1, n + 1)", "range(1, n)")),
    ("base_convert", """
        def base_convert(n, base):
            digits = "0123456789abcdefghijklmnopqrstuvwxyz"
            if n == 0:
                return "0"
            sign = "-" if n < 0 else ""
            n = abs(n)
            out = []
            while n:
                n, r = divmod(n, base)
                out.append(digits[r])
            return sign + "".join(reversed(out))
     """, [(255, 16), (10, 2), (0, 7), (-42, 5), (123456, 36)],
     ('sign = "-" if n < 0 else ""', 'sign = ""')),
    # ---- lists
    ("running_sum", """
        def running_sum(xs):
            out, total = [], 0
            for x in xs:
                total += x
                out.append(total)
            return out
     """, [([1, 2, 3, 4],), ([],), ([5],), ([-1, 1, -1, 1],)],
     ("total += x\n", "total = x\n")),
    ("second_largest", """
        def second_largest(xs):
            distinct = sorted(set(xs))
            return distinct[-2] if len(distinct) >= 2 else None
     """, [([1, 2, 3, 4],), ([4, 4, 4],), ([],), ([10, 5, 10, 7],), ([-1, -2],)],
     ("sorted(set(xs))", "sorted(xs)")),
    ("rotate_list", """
        def rotate_list(xs, k):
            if not xs:
                return []
            k %= len(xs)
            return xs[-k:] + xs[:-k]
     """, [([1, 2, 3, 4, 5], 2), ([1, 2, 3], 0), ([], 4), ([1, 2], 5)],
     ("return xs[-k:] + xs[:-k]", "return xs[k:] + xs[:k]")),
    ("chunk", """
        def chunk(xs, n):
            return [xs[i:i + n] for i in range(0, len(xs), n)]
     """, [([1, 2, 3, 4, 5], 2), ([], 3), ([1, 2, 3], 3), ([1, 2, 3], 5)],
     ("range(0, len(xs), n)", "range(0, len(xs) - 1, n)")),
    ("flatten", """
        def flatten(xs):
            out = []
            for x in xs:
                if isinstance(x, list):
                    out.extend(flatten(x))
                else:
                    out.append(x)
            return out
     """, [([1, [2, [3, [4]]], 5],), ([],), ([[[]]],), ([[1, 2], [3], 4],)],
     ("out.extend(flatten(x))", "out.extend(x)")),
    ("dedupe_keep_order", """
        def dedupe_keep_order(xs):
            seen = set()
            out = []
            for x in xs:
                if x not in seen:
                    seen.add(x)
                    out.append(x)
            return out
     """, [([3, 1, 3, 2, 1],), ([],), ([1, 1, 1],), (["b", "a", "b"],)],
     ("return out", "return sorted(out)")),
    ("max_subarray", """
        def max_subarray(xs):
            best = cur = xs[0]
            for x in xs[1:]:
                cur = max(x, cur + x)
                best = max(best, cur)
            return best
     """, [([-2, 1, -3, 4, -1, 2, 1, -5, 4],), ([1],), ([-3, -1, -2],), ([5, 4, -1, 7, 8],)],
     ("cur = max(x, cur + x)", "cur = cur + x")),
    ("two_sum", """
        def two_sum(xs, target):
            seen = {}
            for i, x in enumerate(xs):
                if target - x in seen:
                    return (seen[target - x], i)
                seen[x] = i
            return None
     """, [([2, 7, 11, 15], 9), ([3, 2, 4], 6), ([3, 3], 6), ([1, 2], 7)],
     ("return (seen[target - x], i)", "return (i, seen[target - x])")),
    ("merge_sorted", """
        def merge_sorted(a, b):
            i = j = 0
            out = []
            while i < len(a) and j < len(b):
                if a[i] <= b[j]:
                    out.append(a[i])
                    i += 1
                else:
                    out.append(b[j])
                    j += 1
            return out + a[i:] + b[j:]
     """, [([1, 3, 5], [2, 4, 6]), ([], [1, 2]), ([1, 1], [1]), ([5, 6], [1, 2, 3])],
     ("return out + a[i:] + b[j:]", "return out + a[i:]")),
    ("pairwise_diff", """
        def pairwise_diff(xs):
            return [b - a for a, b in zip(xs, xs[1:])]
     """, [([1, 4, 9, 16],), ([],), ([5],), ([3, 1, 2],)],
     ("b - a", "a - b")),
    ("move_zeros", """
        def move_zeros(xs):
            nonzero = [x for x in xs if x != 0]
            return nonzero + [0] * (len(xs) - len(nonzero))
     """, [([0, 1, 0, 3, 12],), ([],), ([0, 0],), ([1, 2, 3],)],
     ("[0] * (len(xs) - len(nonzero))", "[0]")),
    ("count_inversions", """
        def count_inversions(xs):
            count = 0
            for i in range(len(xs)):
                for j in range(i + 1, len(xs)):
                    if xs[i] > xs[j]:
                        count += 1
            return count
     """, [([1, 2, 3],), ([3, 2, 1],), ([2, 4, 1, 3, 5],), ([],), ([1, 1, 1],)],
     ("xs[i] > xs[j]", "xs[i] >= xs[j]")),
    ("median", """
        def median(xs):
            s = sorted(xs)
            n = len(s)
            mid = n // 2
            return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2
     """, [([3, 1, 2],), ([4, 1, 3, 2],), ([5],), ([1, 1, 2, 2, 3, 9],)],
     ("s = sorted(xs)", "s = list(xs)")),
    ("mode", """
        def mode(xs):
            counts = {}
            for x in xs:
                counts[x] = counts.get(x, 0) + 1
            best = max(counts.values())
            return min(x for x, c in counts.items() if c == best)
     """, [([1, 2, 2, 3],), ([4, 4, 1, 1],), ([7],), ([3, 3, 2, 2, 1, 1, 1],)],
     ("return min(", "return max(")),
    ("interleave", """
        def interleave(a, b):
            out = []
            for i in range(max(len(a), len(b))):
                if i < len(a):
                    out.append(a[i])
                if i < len(b):
                    out.append(b[i])
            return out
     """, [([1, 2, 3], ["a", "b", "c"]), ([1], [2, 3, 4]), ([], []), ([1, 2, 3], [])],
     ("max(len(a), len(b))", "min(len(a), len(b))")),
    ("zip_sum", """
        def zip_sum(a, b):
            return [x + y for x, y in zip(a, b)] + a[len(b):] + b[len(a):]
     """, [([1, 2, 3], [10, 20, 30]), ([1, 2], [5]), ([], [7, 8]), ([], [])],
     (" + a[len(b):] + b[len(a):]", "")),
    ("binary_search", """
        def binary_search(xs, target):
            lo, hi = 0, len(xs) - 1
            while lo <= hi:
                mid = (lo + hi) // 2
                if xs[mid] == target:
                    return mid
                if xs[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid - 1
            return -1
     """, [([1, 3, 5, 7, 9], 7), ([1, 3, 5, 7, 9], 1), ([1, 3, 5, 7, 9], 9), ([], 3), ([2, 4], 3)],
     ("while lo <= hi", "while lo < hi")),
    ("transpose", """
        def transpose(m):
            return [list(row) for row in zip(*m)]
     """, [([[1, 2, 3], [4, 5, 6]],), ([[1]],), ([],), ([[1, 2], [3, 4], [5, 6]],)],
     ("[list(row) for row in zip(*m)]", "[list(row) for row in m]")),
    ("matrix_mult", """
        def matrix_mult(a, b):
            return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))]
                    for i in range(len(a))]
     """, [([[1, 2], [3, 4]], [[5, 6], [7, 8]]), ([[1, 0], [0, 1]], [[9, 8], [7, 6]]), ([[2, 3]], [[4], [5]])],
     ("a[i][k] * b[k][j]", "a[i][k] * b[j][k]")),
    ("spiral_order", """
        def spiral_order(m):
            out = []
            m = [row[:] for row in m]
            while m:
                out.extend(m.pop(0))
                m = [list(r) for r in zip(*m)][::-1]
            return out
     """, [([[1, 2, 3], [4, 5, 6], [7, 8, 9]],), ([[1, 2], [3, 4]],), ([],), ([[1, 2, 3, 4]],), ([[1], [2], [3]],)],
     ("[::-1]", "")),
    ("pascal_row", """
        def pascal_row(n):
            row = [1]
            for _ in range(n):
                row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
            return row
     """, [(0,), (1,), (4,), (10,)],
     ("[row[i] + row[i + 1] for i in range(len(row) - 1)]", "[row[i] * 2 for i in range(len(row) - 1)]")),
    ("window_max", """
        def window_max(xs, k):
            return [max(xs[i:i + k]) for i in range(len(xs) - k + 1)]
     """, [([1, 3, -1, -3, 5, 3, 6, 7], 3), ([1, 2], 1), ([4, 2, 12, 3], 4), ([9, 8, 7], 2)],
     ("max(xs[i:i + k])", "max(xs[i:i + k - 1] or [0])")),
    # ---- dicts
    ("invert_dict", """
        def invert_dict(d):
            out = {}
            for k, v in d.items():
                out.setdefault(v, []).append(k)
            return {v: sorted(ks) for v, ks in out.items()}
     """, [({"a": 1, "b": 2, "c": 1},), ({},), ({"x": "y"},)],
     ("sorted(ks)", "ks[:1]")),
    ("group_by_length", """
        def group_by_length(words):
            groups = {}
            for w in words:
                groups.setdefault(len(w), []).append(w)
            return groups
     """, [(["a", "bb", "cc", "d", "eee"],), ([],), (["same", "size"],)],
     ("groups.setdefault(len(w), []).append(w)", "groups[len(w)] = [w]")),
    ("merge_counts", """
        def merge_counts(a, b):
            out = dict(a)
            for k, v in b.items():
                out[k] = out.get(k, 0) + v
            return out
     """, [({"a": 1, "b": 2}, {"b": 3, "c": 4}), ({}, {"x": 1}), ({"x": 1}, {})],
     ("out.get(k, 0) + v", "v")),
    ("top_k_frequent", """
        def top_k_frequent(xs, k):
            counts = {}
            for x in xs:
                counts[x] = counts.get(x, 0) + 1
            return sorted(counts, key=lambda x: (-counts[x], x))[:k]
     """, [([1, 1, 1, 2, 2, 3], 2), ([4, 4, 5, 5, 6], 2), ([], 3), ([7], 1)],
     ("(-counts[x], x)", "(counts[x], x)")),
    ("frequency_sorted", """
        def frequency_sorted(s):
            counts = {}
            for w in s.split():
                counts[w] = counts.get(w, 0) + 1
            return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
     """, [("b a b c a b",), ("",), ("x y z",), ("z y x y z",)],
     ("(-kv[1], kv[0])", "(-kv[1],)")),
    ("key_with_max_value", """
        def key_with_max_value(d):
            if not d:
                return None
            return max(sorted(d), key=lambda k: d[k])
     """, [({"a": 1, "b": 3, "c": 2},), ({},), ({"x": 5, "y": 5},)],
     ("max(sorted(d), key=lambda k: d[k])", "max(d)")),
    ("filter_by_value", """
        def filter_by_value(d, threshold):
            return {k: v for k, v in d.items() if v >= threshold}
     """, [({"a": 1, "b": 5, "c": 3}, 3), ({}, 0), ({"x": -1}, 0)],
     ("v >= threshold", "v > threshold")),
    # ---- recursion and dynamic programming
    ("permutations", """
        def permutations(xs):
            if len(xs) <= 1:
                return [list(xs)]
            out = []
            for i, x in enumerate(xs):
                for rest in permutations(xs[:i] + xs[i + 1:]):
                    out.append([x] + rest)
            return out
     """, [([1, 2, 3],), ([],), (["a", "b"],)],
     ("xs[:i] + xs[i + 1:]", "xs[i + 1:]")),
    ("power_set", """
        def power_set(xs):
            if not xs:
                return [[]]
            rest = power_set(xs[1:])
            return rest + [[xs[0]] + r for r in rest]
     """, [([1, 2, 3],), ([],), (["x"],)],
     ("return rest + [[xs[0]] + r for r in rest]", "return [[xs[0]] + r for r in rest]")),
    ("hanoi_moves", """
        def hanoi_moves(n, src="A", dst="C", via="B"):
            if n == 0:
                return []
            return hanoi_moves(n - 1, src, via, dst) + [(src, dst)] + hanoi_moves(n - 1, via, dst, src)
     """, [(0,), (1,), (2,), (3,)],
     ("hanoi_moves(n - 1, via, dst, src)", "hanoi_moves(n - 1, via, src, dst)")),
    ("ackermann", """
        def ackermann(m, n):
            if m == 0:
                return n + 1
            if n == 0:
                return ackermann(m - 1, 1)
            return ackermann(m - 1, ackermann(m, n - 1))
     """, [(0, 0), (1, 2), (2, 3), (3, 3)],
     ("return ackermann(m - 1, 1)", "return ackermann(m - 1, 0)")),
    ("nesting_depth", """
        def nesting_depth(x):
            if not isinstance(x, list):
                return 0
            return 1 + max((nesting_depth(y) for y in x), default=0)
     """, [(5,), ([],), ([1, [2, [3]]],), ([[[]], []],)],
     ("return 1 + max(", "return max(")),
    ("nested_sum", """
        def nested_sum(x):
            if isinstance(x, list):
                return sum(nested_sum(y) for y in x)
            return x
     """, [([1, [2, [3, 4]], 5],), ([],), (7,), ([[[-1]], 1],)],
     ("sum(nested_sum(y) for y in x)", "sum(y for y in x if not isinstance(y, list))")),
    ("no_adjacent_ones", """
        def no_adjacent_ones(n):
            if n <= 0:
                return 1
            if n == 1:
                return 2
            return no_adjacent_ones(n - 1) + no_adjacent_ones(n - 2)
     """, [(0,), (1,), (2,), (5,), (12,)],
     ("return 2", "return 3")),
    ("count_islands", """
        def count_islands(grid):
            grid = [list(row) for row in grid]
            def sink(r, c):
                if 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] == 1:
                    grid[r][c] = 0
                    sink(r + 1, c); sink(r - 1, c); sink(r, c + 1); sink(r, c - 1)
            count = 0
            for r in range(len(grid)):
                for c in range(len(grid[0])):
                    if grid[r][c] == 1:
                        count += 1
                        sink(r, c)
            return count
     """, [([[1, 1, 0], [0, 1, 0], [1, 0, 1]],), ([[0]],), ([[1, 0, 1, 0, 1]],), ([[1, 1], [1, 1]],)],
     ("sink(r + 1, c); sink(r - 1, c); sink(r, c + 1); sink(r, c - 1)", "sink(r, c + 1)")),
    ("edit_distance", """
        def edit_distance(a, b):
            prev = list(range(len(b) + 1))
            for i in range(1, len(a) + 1):
                cur = [i] + [0] * len(b)
                for j in range(1, len(b) + 1):
                    cost = 0 if a[i - 1] == b[j - 1] else 1
                    cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
                prev = cur
            return prev[-1]
     """, [("kitten", "sitting"), ("", "abc"), ("same", "same"), ("flaw", "lawn")],
     ("prev[j - 1] + cost", "prev[j - 1]")),
    ("lcs_length", """
        def lcs_length(a, b):
            table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
            for i in range(len(a)):
                for j in range(len(b)):
                    if a[i] == b[j]:
                        table[i + 1][j + 1] = table[i][j] + 1
                    else:
                        table[i + 1][j + 1] = max(table[i][j + 1], table[i + 1][j])
            return table[-1][-1]
     """, [("abcde", "ace"), ("abc", "def"), ("", "x"), ("AGGTAB", "GXTXAYB")],
     ("max(table[i][j + 1], table[i + 1][j])", "table[i][j + 1]")),
    ("coin_change_ways", """
        def coin_change_ways(amount, coins):
            ways = [1] + [0] * amount
            for coin in coins:
                for v in range(coin, amount + 1):
                    ways[v] += ways[v - coin]
            return ways[amount]
     """, [(5, [1, 2, 5]), (3, [2]), (0, [1]), (10, [10]), (100, [1, 5, 10, 25])],
     ("range(coin, amount + 1)", "range(coin, amount)")),
    ("climb_stairs", """
        def climb_stairs(n):
            a, b = 1, 1
            for _ in range(n):
                a, b = b, a + b
            return a
     """, [(0,), (1,), (2,), (5,), (30,)],
     ("a, b = 1, 1", "a, b = 1, 2")),
    ("knapsack", """
        def knapsack(items, capacity):
            best = [0] * (capacity + 1)
            for weight, value in items:
                for c in range(capacity, weight - 1, -1):
                    best[c] = max(best[c], best[c - weight] + value)
            return best[capacity]
     """, [([(1, 1), (3, 4), (4, 5), (5, 7)], 7), ([], 10), ([(5, 10)], 4), ([(2, 3), (2, 3), (2, 3)], 4), ([(3, 5)], 9)],
     ("range(capacity, weight - 1, -1)", "range(weight, capacity + 1)")),
]


# --- generated family 1: map each integer, then reduce the mapped list.
_MAPS: list[tuple[str, str, str]] = [  # (name, expression of x, wrong expression)
    ("square", "x * x", "x * 2"),
    ("cube", "x ** 3", "x ** 2"),
    ("abs", "abs(x)", "x"),
    ("negated", "-x", "x"),
    ("mod3", "x % 3", "x % 4"),
    ("digitsum", "sum(int(d) for d in str(abs(x)))", "len(str(abs(x)))"),
    ("halved", "x // 2", "x / 2"),
    ("triangular", "x * (x + 1) // 2", "x * (x - 1) // 2"),
]
_REDUCES: list[tuple[str, str, str]] = [  # (name, body over `ys`, wrong body)
    ("sum", "return sum(ys)", "return sum(ys[1:])"),
    ("max", "return max(ys) if ys else None", "return ys[-1] if ys else None"),
    ("count_even", "return sum(1 for y in ys if y % 2 == 0)", "return sum(1 for y in ys if y % 2 == 1)"),
    ("unique_sorted", "return sorted(set(ys))", "return sorted(ys)"),
    ("alternating", "return sum(y if i % 2 == 0 else -y for i, y in enumerate(ys))", "return sum(-y if i % 2 == 0 else y for i, y in enumerate(ys))"),
    ("product_mod", "p = 1\n    for y in ys:\n        p = p * y % 1009\n    return p", "p = 0\n    for y in ys:\n        p = p * y % 1009\n    return p"),
]
_MAP_REDUCE_ARGS = [([1, 2, 3, 4],), ([-5, 0, 5, 10, 10],), ([],), ([7, -3, 12, 8, -3, 1],),
                    ([-9, 2, -4, 6, -1],), ([5, 7, 11],)]

# --- generated family 2: keep the words that pass a filter, then summarise them.
_FILTERS: list[tuple[str, str, str]] = [  # (name, condition on w, wrong condition)
    ("long", "len(w) > 3", "len(w) > 4"),
    ("vowel_start", 'w[:1].lower() in ("a", "e", "i", "o", "u")', 'w[:1] in ("a", "e", "i", "o", "u")'),
    ("palindromic", "w.lower() == w.lower()[::-1]", "w == w[::-1]"),
    ("with_digit", "any(c.isdigit() for c in w)", "w[-1:].isdigit()"),
    ("lowercase", "w.islower()", "w == w.lower()"),
]
_SUMMARIES: list[tuple[str, str, str]] = [  # (name, body over `kept`, wrong body)
    ("count", "return len(kept)", "return len(set(kept))"),
    ("joined", 'return "-".join(kept)', 'return "-".join(sorted(kept))'),
    ("lengths", "return [len(w) for w in kept]", "return sorted(len(w) for w in kept)"),
    ("longest", 'return max(kept, key=len) if kept else ""', 'return max(kept) if kept else ""'),
]
_WORD_ARGS = [
    ("Anna saw 12 otters and Eve ate a kayak ok",),
    ("",),
    ("level Noon x9 apple apple banana Idea 2b",),
    ("UPPER lower Mixed e5e refer Otto",),
    ("zz9 aardvark Wow racecar xyz 42 Stats",),
    ("zebra elephant noon noon wow racecar 7up x9 x9 Anna 42",),
    ("tree bus a",),
    ("Abba xy",),
    ("123 4567 AB",),
]


def _hand_problems() -> list[tuple[str, str, str, list[tuple]]]:
    out = []
    for name, solution, args, (old, new) in _HAND:
        solution = dedent(solution).strip() + "\n"
        if solution.count(old) != 1:
            raise AssertionError(f"{name}: the wrong variant's text must occur once")
        out.append((name, solution, solution.replace(old, new), args))
    return out


def _generated_problems() -> list[tuple[str, str, str, list[tuple]]]:
    out = []
    for mname, expr, wrong_expr in _MAPS:
        for rname, body, wrong_body in _REDUCES:
            name = f"{rname}_of_{mname}"
            src = "def {name}(xs):\n    ys = [{expr} for x in xs]\n    {body}\n"
            solution = src.format(name=name, expr=expr, body=body)
            # alternate which half is wrong so the mistakes differ across the family
            wrong = src.format(name=name, expr=wrong_expr if len(out) % 2 else expr,
                               body=body if len(out) % 2 else wrong_body)
            out.append((name, solution, wrong, _MAP_REDUCE_ARGS))
    for fname, cond, wrong_cond in _FILTERS:
        for sname, body, wrong_body in _SUMMARIES:
            name = f"{sname}_of_{fname}_words"
            src = "def {name}(s):\n    kept = [w for w in s.split() if {cond}]\n    {body}\n"
            solution = src.format(name=name, cond=cond, body=body)
            wrong = src.format(name=name, cond=wrong_cond if len(out) % 2 else cond,
                               body=body if len(out) % 2 else wrong_body)
            out.append((name, solution, wrong, _WORD_ARGS))
    return out


def _results(source: str, name: str, args: list[tuple]) -> list[object]:
    namespace: dict = {}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    fn = namespace[name]
    out = []
    for a in args:
        try:
            out.append(("ok", fn(*a)))
        except Exception as exc:  # noqa: BLE001 - a wrong variant may raise
            out.append(("raised", type(exc).__name__))
    return out


def _tests(name: str, args: list[tuple], expected: list[object]) -> str:
    lines = []
    for a, (_, value) in zip(args, expected, strict=True):
        call = f"{name}({', '.join(repr(x) for x in a)})"
        lines.append(f"assert {call} == {value!r}, {call!r}")
    return "\n".join(lines) + "\n"


def _looping(name: str, solution: str) -> str:
    """The candidate that never returns: the loop's state stops advancing."""
    replacements = {
        "gcd": ("a, b = b, a % b", "a, b = a, b"),
        "collatz_steps": ("n = n // 2 if n % 2 == 0 else 3 * n + 1", "n = n if n % 2 == 0 else 3 * n + 1"),
    }
    old, new = replacements[name]
    return solution.replace(old, new)


@functools.cache
def _build(seed: int) -> tuple[Problem, ...]:
    out: list[Problem] = []
    seen: set[str] = set()
    for index, (name, solution, wrong, args) in enumerate(_hand_problems() + _generated_problems()):
        if name in seen:
            raise AssertionError(f"duplicate problem {name}")
        seen.add(name)
        good = _results(solution, name, args)
        if any(kind != "ok" for kind, _ in good):
            raise AssertionError(f"{name}: the solution raised on its own tests")
        if _results(wrong, name, args) == good:
            raise AssertionError(f"{name}: the wrong variant passes every test")
        if name in LOOPING:
            kind = "loop"
        elif (index + seed) % WRONG_EVERY == WRONG_EVERY - 2:
            kind = "wrong"
        else:
            kind = "correct"
        out.append(Problem(
            id=f"HE/{index:03d}/{name}", entry_point=name, solution=solution,
            tests=_tests(name, args, good), wrong=wrong, kind=kind,
            looping=_looping(name, solution) if kind == "loop" else None,
        ))
    return tuple(out)


def problems(seed: int = 0) -> list[Problem]:
    """Every problem, in a fixed order; `seed` moves which ~20% of candidates are wrong."""
    return list(_build(seed))


def candidate(problem: Problem) -> str:
    """The program to check: correct, wrong or looping, as `problem.kind` says."""
    if problem.kind == "loop":
        assert problem.looping is not None
        return problem.looping
    return problem.wrong if problem.kind == "wrong" else problem.solution


def expected_verdict(problem: Problem) -> str:
    return {"correct": "passed", "wrong": "failed", "loop": "timeout"}[problem.kind]


def workload(seed: int = 0) -> list[dict[str, str]]:
    """Plain dicts for drivers in other interpreters: id, program (the candidate), tests, expected."""
    return [{"id": p.id, "program": candidate(p), "tests": p.tests, "expected": expected_verdict(p)}
            for p in problems(seed)]


if __name__ == "__main__":
    import collections
    import json
    import sys

    items = problems()
    kinds = collections.Counter(p.kind for p in items)
    print(json.dumps({"problems": len(items), "kinds": kinds}), file=sys.stderr)
    # self-check: every candidate behaves as expected when run natively (loops skipped)
    for p in items:
        if p.kind == "loop":
            continue
        ns: dict = {}
        try:
            exec(candidate(p) + "\n" + p.tests, ns)
            got = "passed"
        except AssertionError:
            got = "failed"
        except Exception:  # noqa: BLE001
            got = "failed"
        assert got == expected_verdict(p), (p.id, got)
    print("ok", file=sys.stderr)
