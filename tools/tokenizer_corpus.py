#!/usr/bin/env python3
"""Writes the deterministic tokenizer parity corpus (>= 10 MB).

The corpus is a sequence of documents, each a little-endian uint32 byte length followed by
the bytes. Documents are raw bytes on purpose: some hold ill-formed UTF-8 (truncated and
overlong sequences, UTF-8-encoded lone surrogates, stray bytes), which the C++ tokenizer
repairs like Python's `bytes.decode("utf-8", errors="replace")` before encoding; the
reference side decodes the same way. Content: hand-written edge cases, English prose,
source code in several languages, Chinese, Japanese, Korean, Arabic and other scripts,
emoji with ZWJ sequences, long whitespace and digit runs, chat transcripts with special
tokens embedded, and every Unicode scalar value.

Usage: tokenizer_corpus.py --output corpus.bin [--scale 1.0]
"""
import argparse
import random
import struct

WORDS = (
    "the of and to in is was that for it with as his on be at by this had not are but from "
    "or have an they which one you were her all she there would their we him been has when "
    "who will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me even "
    "most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world "
    "still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right "
    "used take three small large river mountain engine request token model server kernel "
    "memory thread queue latency throughput cache page block tensor matrix vector gradient "
    "weather garden letter window morning evening silver orange quietly suddenly careful "
    "don't can't won't it's I'm you're we've they'll she'd O'Neil rock'n'roll naïve café "
    "résumé coöperate façade jalapeño Zürich Ångström"
).split()

EDGE_CASES = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "0", "00", "000", "0000", "12345678901",
    "Hello, world!", "hello world", " hello", "hello ", "  leading and trailing  ",
    "I'm", "it's", "we'll", "they've", "'s", "'re'll'd", "''''", "\"quoted\"",
    "a\nb", "a\r\nb", "a\n\n\nb", "   \n", "\n   ", " \n \n ", "x  \n  y",
    "...", "?!?!", "--", "—", "a-b_c.d", "e.g.", "U.S.A.", "3.14159", "1,000,000", "1e-9",
    "$100", "100%", "#hashtag", "@mention", "email@example.com", "https://example.com/a?b=c&d=e",
    "<think>", "</think>", "<think>reasoning</think>answer", "<<think>>", "<think", "think>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>hi<｜Assistant｜>",
    "<｜User｜", "｜User｜>", "<｜DSML｜", "｜DSML｜", "<｜DSML｜tool_calls>", "x<｜User｜>y",
    " <｜User｜> ", "\n<｜Assistant｜>\n", "<｜place▁holder▁no▁7｜>", "<|EOT|>", "<dsml:", "</dsml:",
    "中文", "中文测试", "日本語のテキスト", "ひらがな", "カタカナ", "한국어", "混合English文本",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "1️⃣", "❤️", "🧑‍💻 coding", "a😀b",
    "\u00a0", "\u3000", "\u2028", "\u2029", "\u200b", "\u200d", "\ufeff", "\u180e", "\u0085",
    "\x1c\x1d\x1e\x1f", "\x00", "a\x00b", "\x7f", "\ufffd", "\U0010ffff", "\U000e0001",
    "e\u0301", "\u0301", "a\u0300\u0301\u0302", "각", "\u0915\u094d\u0937", "ﷺ", "ﬁ",
    "١٢٣", "٣.١٤", "①②③", "²³", "Ⅻ", "𝟘𝟙𝟚", "½", "๑๒๓", "１２３４", "ⅰⅱ",
    "𝐀𝐁𝐂", "Ⓐⓑ", "ǅ", "ß", "İ", "ﬀ",
]

SPECIAL = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>",
    "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁42｜>", "<｜▁pad▁｜>", "<dsml:", "</dsml:",
    "<｜image｜>", "<｜table｜>", "<｜/table>｜",
]

CJK_PUNCT = "，。、；：？！「」『』（）《》…—"
EMOJI = [
    "😀", "😂", "🥲", "😍", "🤖", "🚀", "🔥", "✨", "🎉", "🍕", "🐍", "🦀", "🌍", "💡",
    "👍", "👍🏻", "👍🏿", "👋🏼", "🙏🏾", "👨‍💻", "👩‍🔬", "🧑‍🚀", "👨‍👩‍👧", "👨‍👩‍👧‍👦",
    "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🏴‍☠️", "🐻‍❄️", "❤️‍🔥", "🇫🇷", "🇨🇳", "🇧🇷", "#️⃣", "9️⃣",
    "☺️", "✌🏽", "🫠", "🫶🏼", "🪿", "🩷",
]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def word(self):
        w = self.r.choice(WORDS)
        roll = self.r.random()
        if roll < 0.08:
            w = w.capitalize()
        elif roll < 0.1:
            w = w.upper()
        return w

    def sentence(self):
        n = self.r.randint(3, 25)
        words = [self.word() for _ in range(n)]
        words[0] = words[0].capitalize()
        for i in range(1, n):
            roll = self.r.random()
            if roll < 0.06:
                words[i] += ","
            elif roll < 0.08:
                words[i] = "(" + words[i] + ")"
            elif roll < 0.1:
                words[i] = '"' + words[i] + '"'
            elif roll < 0.12:
                words[i] = str(self.r.randint(0, 10 ** self.r.randint(1, 7)))
            elif roll < 0.13:
                words[i] = f"{self.r.randint(1, 12)}/{self.r.randint(1, 28)}/{self.r.randint(1900, 2100)}"
        return " ".join(words) + self.r.choice([".", ".", ".", "?", "!", "...", ";", ":"])

    def prose(self, size):
        out = []
        total = 0
        while total < size:
            para = " ".join(self.sentence() for _ in range(self.r.randint(1, 8)))
            out.append(para)
            out.append(self.r.choice(["\n\n", "\n", "\n\n", " ", "\r\n\r\n"]))
            total += len(para) + 2
        return "".join(out)

    def ident(self):
        parts = [self.r.choice(WORDS).strip("'").lower() for _ in range(self.r.randint(1, 3))]
        parts = [p for p in parts if p.isascii() and p.isalpha()] or ["x"]
        style = self.r.random()
        if style < 0.4:
            return "_".join(parts)
        if style < 0.7:
            return parts[0] + "".join(p.capitalize() for p in parts[1:])
        if style < 0.85:
            return "".join(p.capitalize() for p in parts)
        return "_".join(parts).upper() + str(self.r.randint(0, 99))

    def code(self, size):
        out = []
        total = 0
        makers = [self.python, self.cpp, self.js, self.rust, self.go, self.sql, self.html,
                  self.json_doc, self.shell]
        while total < size:
            snippet = self.r.choice(makers)()
            if self.r.random() < 0.1:
                snippet = snippet.replace("\n", "\r\n")
            if self.r.random() < 0.15:
                snippet = snippet.replace("    ", "\t")
            out.append(snippet)
            total += len(snippet)
        return "".join(out)

    def python(self):
        f, a, b = self.ident(), self.ident(), self.ident()
        n = self.r.randint(0, 1000)
        return (f"def {f}({a}, {b}=None):\n    \"\"\"{self.sentence()}\"\"\"\n"
                f"    if {b} is None:\n        {b} = [{n}, {n * 2}, 0x{n:x}]\n"
                f"    for i in range(len({a})):\n        {a}[i] += {b}[i % 3] ** 2  # {self.word()}\n"
                f"    return {{'{a}': {a}, \"{b}\": {b}}}\n\n\n")

    def cpp(self):
        c, m, v = self.ident(), self.ident(), self.ident()
        return (f"template <typename T>\nclass {c.title().replace('_', '')} {{\n public:\n"
                f"  explicit {c}(std::vector<T> {v}) : {v}_(std::move({v})) {{}}\n"
                f"  T {m}(size_t i) const {{ return {v}_[i] * {self.r.randint(1, 99)}; }}\n"
                f"  // {self.sentence()}\n private:\n  std::vector<T> {v}_;\n}};\n\n"
                f"int main(int argc, char** argv) {{\n  std::cout << \"{self.word()}\\n\" << argc << std::endl;\n"
                f"  return argc > {self.r.randint(0, 5)} ? 0 : -1;\n}}\n")

    def js(self):
        f, x = self.ident(), self.ident()
        return (f"const {f} = async ({x}) => {{\n  const res = await fetch(`/api/{x}?q=${{{x}}}`);\n"
                f"  if (!res.ok) throw new Error('{self.sentence()}');\n"
                f"  return res.json().then(d => d.{x} ?? [{self.r.randint(0, 9)}]);\n}};\n"
                f"export default {{ {f}, version: \"{self.r.randint(0, 9)}.{self.r.randint(0, 99)}\" }};\n")

    def rust(self):
        s, fld = self.ident(), self.ident()
        return (f"#[derive(Debug, Clone)]\npub struct {s.title().replace('_', '')} {{\n    pub {fld}: Vec<u32>,\n}}\n\n"
                f"impl {s.title().replace('_', '')} {{\n    pub fn sum(&self) -> u64 {{\n"
                f"        self.{fld}.iter().map(|&x| x as u64).sum::<u64>() + {self.r.randint(0, 10 ** 6)}\n"
                f"    }}\n}}\n// {self.sentence()}\n")

    def go(self):
        f = self.ident()
        return (f"package main\n\nimport \"fmt\"\n\nfunc {f}(n int) (int, error) {{\n"
                f"\tif n < {self.r.randint(0, 9)} {{\n\t\treturn 0, fmt.Errorf(\"{self.word()}: %d\", n)\n\t}}\n"
                f"\treturn n * {self.r.randint(2, 9)}, nil\n}}\n")

    def sql(self):
        t, c = self.ident(), self.ident()
        return (f"SELECT {c}, COUNT(*) AS n FROM {t}\nWHERE {c} >= {self.r.randint(0, 10000)} "
                f"AND name LIKE '%{self.word()}%'\nGROUP BY {c} ORDER BY n DESC LIMIT 10;\n")

    def html(self):
        return (f"<div class=\"{self.ident()}\">\n  <p>{self.sentence()}</p>\n"
                f"  <a href=\"https://example.org/{self.ident()}\">{self.word()}</a>&nbsp;&amp;\n</div>\n")

    def json_doc(self):
        return ("{\"" + self.ident() + "\": [" + ", ".join(str(self.r.randint(-999, 999)) for _ in range(5)) +
                "], \"ok\": true, \"name\": \"" + self.word() + "\", \"nested\": {\"x\": null}}\n")

    def shell(self):
        return (f"#!/usr/bin/env bash\nset -euo pipefail\nfor f in ./{self.ident()}/*.txt; do\n"
                f"  grep -c \"{self.word()}\" \"$f\" | awk '{{print $1 * {self.r.randint(1, 9)}}}' >> out.log 2>&1\ndone\n")

    def chars(self, lo, hi, n):
        return "".join(chr(self.r.randint(lo, hi)) for _ in range(n))

    def chinese(self, size):
        out = []
        total = 0
        while total < size:
            run = self.chars(0x4E00, 0x9FA5, self.r.randint(1, 40))
            out.append(run)
            roll = self.r.random()
            if roll < 0.6:
                out.append(self.r.choice(CJK_PUNCT))
            elif roll < 0.7:
                out.append(self.word())
            elif roll < 0.8:
                out.append(str(self.r.randint(0, 99999)))
            elif roll < 0.85:
                out.append("\n")
            elif roll < 0.9:
                out.append(self.chars(0x3400, 0x4DBF, 2) + self.chars(0x20000, 0x2A6DF, 2))
            total += len(run) * 3
        return "".join(out)

    def japanese(self, size):
        out = []
        total = 0
        while total < size:
            pick = self.r.random()
            if pick < 0.4:
                run = self.chars(0x3041, 0x3096, self.r.randint(1, 12))
            elif pick < 0.7:
                run = self.chars(0x30A1, 0x30FA, self.r.randint(1, 8)) + "ー"
            else:
                run = self.chars(0x4E00, 0x9FA5, self.r.randint(1, 5))
            out.append(run)
            if self.r.random() < 0.3:
                out.append(self.r.choice("、。「」！？・"))
            total += len(run) * 3
        return "".join(out)

    def korean(self, size):
        out = []
        total = 0
        while total < size:
            run = self.chars(0xAC00, 0xD7A3, self.r.randint(1, 6))
            out.append(run + self.r.choice([" ", " ", ". ", ", ", "\n", "? "]))
            total += len(run) * 3 + 1
        return "".join(out)

    def script_text(self, size):
        # Alphabets with combining marks, right-to-left text and their own digits.
        scripts = [
            (0x0621, 0x064A, "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652", "٠١٢٣٤٥٦٧٨٩"),
            (0x05D0, 0x05EA, "\u05b0\u05b4\u05b7\u05bc", ""),
            (0x0430, 0x044F, "", ""),
            (0x03B1, 0x03C9, "\u0301\u0308", ""),
            (0x0905, 0x0939, "\u093e\u093f\u0940\u0941\u094d\u0902", "०१२३४५६७८९"),
            (0x0E01, 0x0E2E, "\u0e31\u0e34\u0e35\u0e48\u0e49", "๐๑๒๓๔๕๖๗๘๙"),
            (0x10D0, 0x10FA, "", ""),
            (0x0531, 0x0556, "", ""),
        ]
        out = []
        total = 0
        while total < size:
            lo, hi, marks, digits = self.r.choice(scripts)
            for _ in range(self.r.randint(1, 12)):
                w = []
                for _ in range(self.r.randint(1, 9)):
                    w.append(chr(self.r.randint(lo, hi)))
                    if marks and self.r.random() < 0.3:
                        w.append(self.r.choice(marks))
                if digits and self.r.random() < 0.1:
                    w.append("".join(self.r.choice(digits) for _ in range(self.r.randint(1, 6))))
                out.append("".join(w))
                out.append(self.r.choice([" ", " ", " ", "، ", ". ", "\n", "؟ "]))
                total += 2 * len(w) + 1
        return "".join(out)

    def emoji_text(self, size):
        out = []
        total = 0
        while total < size:
            roll = self.r.random()
            if roll < 0.5:
                out.append("".join(self.r.choice(EMOJI) for _ in range(self.r.randint(1, 6))))
            elif roll < 0.7:
                out.append(" " + self.word() + " ")
            elif roll < 0.8:
                out.append(chr(self.r.randint(0x1F300, 0x1FAFF)) + self.r.choice(["", "\ufe0f", "\u200d"]))
            else:
                out.append(self.r.choice(["\u200d", "\ufe0f", "\U0001f3fb", " ", "\n"]))
            total += 8
        return "".join(out)

    def runs(self, size):
        out = []
        total = 0
        pieces = [" ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\x0b", "\x0c"]
        while total < size:
            roll = self.r.random()
            if roll < 0.35:
                n = self.r.choice([1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 64, 100, 257, 1000, 5000])
                out.append(self.r.choice(pieces) * n)
            elif roll < 0.5:
                out.append("".join(self.r.choice(pieces) for _ in range(self.r.randint(1, 50))))
            elif roll < 0.75:
                n = self.r.choice([1, 2, 3, 4, 5, 6, 7, 10, 33, 100, 500, 2000])
                out.append("".join(self.r.choice("0123456789") for _ in range(n)))
            elif roll < 0.85:
                out.append(self.r.choice(["１２３", "٣٤٥", "①②", "²³¹", "Ⅻ", "𝟙𝟚𝟛", "১২৩"]) * self.r.randint(1, 9))
            else:
                out.append(self.word())
            total += len(out[-1])
        return "".join(out)

    def chat(self, size):
        out = []
        total = 0
        while total < size:
            turn = ["<｜begin▁of▁sentence｜>", self.sentence()]
            for _ in range(self.r.randint(1, 4)):
                turn += ["<｜User｜>", self.sentence(), "<｜Assistant｜>"]
                if self.r.random() < 0.5:
                    turn += ["<think>", self.prose(200), "</think>"]
                else:
                    turn.append("</think>")
                turn.append(self.sentence())
                if self.r.random() < 0.3:
                    name = self.ident()
                    turn += ["\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"", name, "\">\n",
                             "<｜DSML｜parameter name=\"q\" string=\"true\">", self.word(),
                             "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"]
                turn.append("<｜end▁of▁sentence｜>")
            # Special tokens in odd places: glued to words, spaced, doubled, truncated.
            for _ in range(self.r.randint(0, 6)):
                tok = self.r.choice(SPECIAL)
                variant = self.r.random()
                if variant < 0.3:
                    tok = tok[: self.r.randint(1, len(tok))]
                elif variant < 0.5:
                    tok = " " + tok + " "
                elif variant < 0.6:
                    tok = tok + tok
                turn.insert(self.r.randint(0, len(turn)), tok)
            doc = "".join(turn)
            out.append(doc)
            total += len(doc.encode())
        return "".join(out)

    def invalid_bytes(self, size):
        # Ill-formed UTF-8 mixed with valid text.
        bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf",
               b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xf0\x80\x80\xaf",
               b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
               b"\xc3", b"\xe4\xb8", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xe2\x82", b"\xc3\x28",
               b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", "\ud800".encode("utf-8", "surrogatepass"),
               "\udfff".encode("utf-8", "surrogatepass")]
        out = bytearray()
        while len(out) < size:
            roll = self.r.random()
            if roll < 0.4:
                out += self.r.choice(bad)
            elif roll < 0.6:
                out += bytes(self.r.randint(0, 255) for _ in range(self.r.randint(1, 8)))
            elif roll < 0.8:
                out += self.sentence().encode()
            else:
                out += self.r.choice(EMOJI + ["中文", "é", "ß", " ", "\n"]).encode()
        return bytes(out)

    def soup(self, size):
        # Random scalar values from every plane, between ASCII context.
        out = []
        total = 0
        while total < size:
            cp = self.r.randint(0, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                continue
            out.append(chr(cp))
            if self.r.random() < 0.3:
                out.append(self.r.choice([" ", "a", "1", ".", "\n", "  ", "'s", "中"]))
            total += 4
        return "".join(out)


def all_scalars(chunk_chars):
    """Every Unicode scalar value, in order, with ASCII context every few characters."""
    docs = []
    buf = []
    fillers = [" ", "a", "1", ".", "\n", " x", "'", "-"]
    k = 0
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        buf.append(chr(cp))
        k += 1
        if k % 7 == 0:
            buf.append(fillers[(k // 7) % len(fillers)])
        if len(buf) >= chunk_chars:
            docs.append("".join(buf).encode())
            buf = []
    if buf:
        docs.append("".join(buf).encode())
    return docs


def build(scale):
    g = Gen(20240607)
    docs = [s.encode() for s in EDGE_CASES]
    # Edge cases again with context on both sides.
    docs += [("x" + s + "y").encode() for s in EDGE_CASES]
    docs += [(" " + s + " ").encode() for s in EDGE_CASES]

    def sized(maker, total, lo, hi):
        made = 0
        while made < total:
            n = g.r.randint(lo, hi)
            d = maker(n)
            d = d if isinstance(d, bytes) else d.encode()
            docs.append(d)
            made += len(d)

    mb = int(1_000_000 * scale)
    sized(g.prose, int(1.8 * mb), 200, 60_000)
    sized(g.code, int(1.6 * mb), 200, 40_000)
    sized(g.chinese, int(1.0 * mb), 100, 30_000)
    sized(g.japanese, int(0.4 * mb), 100, 20_000)
    sized(g.korean, int(0.3 * mb), 100, 20_000)
    sized(g.script_text, int(0.8 * mb), 100, 20_000)
    sized(g.emoji_text, int(0.4 * mb), 50, 10_000)
    sized(g.runs, int(0.5 * mb), 50, 20_000)
    sized(g.chat, int(0.6 * mb), 100, 20_000)
    sized(g.invalid_bytes, int(0.25 * mb), 1, 5_000)
    sized(g.soup, int(0.4 * mb), 10, 8_000)
    # One large document of each main kind exercises long inputs.
    docs.append(g.prose(int(0.5 * mb)).encode())
    docs.append(g.chinese(int(0.2 * mb)).encode())
    if scale >= 1.0:
        docs += all_scalars(4096)
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="size factor; 1.0 gives the full corpus with every scalar value")
    args = ap.parse_args()
    docs = build(args.scale)
    with open(args.output, "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)))
            f.write(d)
    total = sum(len(d) for d in docs)
    print(f"{len(docs)} documents, {total} bytes")


if __name__ == "__main__":
    main()
