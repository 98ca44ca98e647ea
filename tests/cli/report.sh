# report.sh — `tessera report`: the HTML page of a 4-rank dp 2 x pp 2 run and
# of a one-rank run (10 steps each) parses with balanced svg/div/table tags,
# holds one <svg id="chart-..."> per chart (the pipeline bubble only for the
# pipeline run), every line has a point per step, and nothing refers outside
# the file (no URL, no script, no link). A skipped step (loss and gradient
# norm null) leaves a gap; val_loss on some steps joins the loss chart. Bad
# input fails cleanly (status 1 or 2, never a signal) with one message: a
# missing file, an empty file, a truncated third line (naming ":3:"), a
# member of the wrong type, --out into a missing directory, --out onto a
# directory (refused before any temporary file is made), no argument.
# Usage: report.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config

run_mpi 4 "$TESSERA" train model.ini --set parallel.plugins=dp,pp --set pp.size=2 \
    --set train.micro_batch=4 --set train.steps=10 --set train.metrics=m.jsonl > pp.txt 2>&1 ||
    { tail -n 30 pp.txt; fail "the 4-rank dp x pp run failed"; }
"$TESSERA" train model.ini --set train.steps=10 --set train.metrics=one.jsonl > one.txt 2>&1 ||
    { tail -n 30 one.txt; fail "the one-rank run failed"; }

# check HTML METRICS pipeline|one full|skip: the page against its metrics.
check() {
    python3 - "$@" <<'PY' || fail "$1 does not hold the expected charts"
import html.parser, json, re, sys

page, metrics, kind, mode = sys.argv[1:5]
text = open(page, encoding="utf-8").read()
steps = [json.loads(l) for l in open(metrics) if l.strip()]
n = len(steps)

low = text.lower()
for bad in ("http:", "https:", "//", "src=", "<link", "<script"):
    assert bad not in low, "%s refers outside itself: %r found" % (page, bad)

class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.svg, self.charts = [], None, {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("svg", "div", "table"):
            self.stack.append(tag)
        if tag == "svg":
            self.svg = a.get("id") or "(no id)"
            assert self.svg not in self.charts, "two charts with id %s" % self.svg
            self.charts[self.svg] = []
            assert a.get("viewbox"), "%s has no viewBox" % self.svg
        if tag == "polyline":
            assert self.svg, "a polyline outside an svg"
            self.charts[self.svg].append((a.get("data-series"), len(a["points"].split())))

    def handle_endtag(self, tag):
        if tag in ("svg", "div", "table"):
            assert self.stack and self.stack[-1] == tag, "</%s> closes <%s>" % (
                tag, self.stack[-1] if self.stack else "nothing")
            self.stack.pop()
        if tag == "svg":
            self.svg = None

p = Page()
p.feed(text)
p.close()
assert not p.stack, "unclosed tags: %s" % p.stack

expected = ["chart-loss", "chart-lr", "chart-grad-norm", "chart-tokens", "chart-step-ms",
            "chart-memory", "chart-comm-bytes", "chart-comm-seconds"]
if kind == "pipeline":
    expected.append("chart-bubble")
else:
    assert "chart-bubble" not in p.charts, "a bubble chart for a run without a pipeline"
for c in expected:
    assert c in p.charts, "no <svg id=%s>" % c

ops = sorted({g + "." + op for s in steps for g in s.get("comm", {}) for op in s["comm"][g]})
lines = {"chart-loss": 1, "chart-lr": 1, "chart-grad-norm": 1, "chart-tokens": 1,
         "chart-step-ms": 1, "chart-memory": 2 * len(steps[0]["mem"]),
         "chart-comm-bytes": len(ops), "chart-comm-seconds": len(ops)}
if kind == "pipeline":
    lines["chart-bubble"] = steps[0]["pipeline"]["stages"]
    assert lines["chart-bubble"] > 1 and len(ops) > 0
else:
    assert len(ops) == 0

if mode == "full":
    for c, want in lines.items():
        got = p.charts[c]
        assert len(got) == want, "%s: %d lines, expected %d" % (c, len(got), want)
        for name, points in got:
            assert points == n, "%s, line %s: %d points for %d steps" % (c, name, points, n)
    series = {name for name, _ in p.charts["chart-comm-bytes"]}
    assert series == set(ops), "comm lines %s, expected %s" % (sorted(series), ops)
else:  # one null loss and grad_norm in the middle, val_loss on some steps
    gaps = sum(1 for s in steps if s["loss"] is None)
    loss = [k for name, k in p.charts["chart-loss"] if name == "loss"]
    assert len(loss) == 2 and sum(loss) == n - gaps, "loss lines around the gap: %s" % loss
    norm = [k for name, k in p.charts["chart-grad-norm"]]
    assert len(norm) == 2 and sum(norm) == n - gaps, "grad norm lines: %s" % norm
    val = [k for name, k in p.charts["chart-loss"] if name == "val_loss"]
    assert val == [sum(1 for s in steps if "val_loss" in s)], "val_loss line: %s" % val

# The summary: the file's name, the number of steps, the first and last loss.
assert metrics in text, "the page does not name %s" % metrics
assert re.search(r"<td>%d\b" % n, text), "the summary does not give %d steps" % n
losses = [s["loss"] for s in steps if s["loss"] is not None]
for v in (losses[0], losses[-1]):
    assert "%.4f" % v in text, "the summary lacks the loss %.4f" % v
print("ok %s: %d charts, %d steps, %d lines" % (
    page, len(p.charts), n, sum(len(v) for v in p.charts.values())))
PY
}

# The default output name: METRICS with .jsonl replaced by .html.
"$TESSERA" report m.jsonl > report_m.txt 2>&1 || { cat report_m.txt; fail "report m.jsonl failed"; }
[ -f m.html ] || fail "report m.jsonl did not write m.html"
check m.html m.jsonl pipeline full
"$TESSERA" report one.jsonl --out one-report.html > report_one.txt 2>&1 ||
    { cat report_one.txt; fail "report one.jsonl failed"; }
check one-report.html one.jsonl one full

# A skipped step (step 5: loss and gradient norm null) and val_loss on steps
# 5 and 10.
python3 - <<'PY' || fail "cannot write skip.jsonl"
import json
lines = [json.loads(l) for l in open("one.jsonl")]
lines[4].update(loss=None, grad_norm=None, skipped=True, skipped_steps=1)
lines[4]["val_loss"] = 5.0
lines[9]["val_loss"] = lines[9]["loss"] + 0.1
with open("skip.jsonl", "w") as f:
    f.writelines(json.dumps(l, separators=(",", ":")) + "\n" for l in lines)
PY
"$TESSERA" report skip.jsonl > report_skip.txt 2>&1 ||
    { cat report_skip.txt; fail "report of a skipped step failed"; }
check skip.html skip.jsonl one skip

# Bad input: one message line each, exit status 1 (2 for the command line).
: > empty.jsonl
head -n 2 m.jsonl > trunc.jsonl
sed -n 3p m.jsonl | head -c 300 >> trunc.jsonl
echo >> trunc.jsonl
sed -n 4p m.jsonl >> trunc.jsonl
sed '2s/"loss":[-0-9.e]*/"loss":"low"/' one.jsonl > wrong_type.jsonl
mkdir outdir
expect report_missing 'tessera report: nosuch\.jsonl: No such file or directory' 1 report \
    nosuch.jsonl
expect report_empty 'tessera report: empty\.jsonl: the file is empty' 1 report empty.jsonl
expect report_truncated 'tessera report: trunc\.jsonl:3: .*column' 1 report trunc.jsonl
expect report_wrong_type 'wrong_type\.jsonl:2: "loss" is a string, expected a number' 1 report \
    wrong_type.jsonl
expect report_no_dir 'tessera report: nodir/r\.html: .*No such file or directory' 1 report m.jsonl \
    --out nodir/r.html
expect report_out_is_dir 'tessera report: --out outdir: is a directory; refusing to replace it' 1 report \
    m.jsonl --out outdir
expect report_no_args 'usage: tessera report' 1 report
for name in report_missing report_empty report_truncated report_wrong_type report_no_dir \
    report_out_is_dir; do
    [ "$(wc -l < $name.txt)" -eq 1 ] || { cat $name.txt; fail "$name: not one line"; }
done
[ ! -e trunc.html ] || fail "a failed report left trunc.html"
leftover=$(ls -a . outdir | grep '\.tmp\.' || true)
[ -z "$leftover" ] || fail "temporary files left behind: $leftover"
"$TESSERA" report > /dev/null 2>&1
[ $? -eq 2 ] || fail "report without a file: exit status is not 2"
"$TESSERA" report --help | grep -q 'usage: tessera report' || fail "report --help"

echo PASS
