"""The rater page's and the operator page's own HTML, CSS and JavaScript, served by the app (no
CDN, no fonts to fetch), kept as module text so an installed package carries them without
package-data rules.

The script builds every element with ``textContent`` and ``setAttribute``; no server value ever
goes through ``innerHTML``, so a caption holding ``<script>`` or markup shows as the text it is.
The slider starts unset (its thumb hidden) and a rater cannot move on without moving it; the
absolute score is never shown (CxC appendix: so raters do not chase round numbers).
"""

from __future__ import annotations

_HEAD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="/static/rater.css">{more}
</head>
"""

RATER_HTML = (
    _HEAD.format(title="Rating — crisscross", more="")
    + """<body>
<header class="bar">
  <span class="brand">Rating</span>
  <span id="who"></span>
  <form method="post" action="/signout"><button type="submit" class="link">Sign out</button></form>
</header>
<main id="app" aria-live="polite"><p>Loading…</p></main>
<script src="/static/rater.js"></script>
</body>
</html>
"""
)


def _signin(heading: str, lead: str, action: str) -> str:
    """A sign-in page: its script posts the link's token to ``action``."""
    return (
        _HEAD.format(title=f"{heading} — crisscross", more="")
        + f"""<body>
<main class="narrow">
  <h1>{heading}</h1>
  <p>{lead}</p>
  <form method="post" action="{action}" id="signin">
    <label for="token">Token</label>
    <input id="token" name="token" type="password" autocomplete="off" required maxlength="256">
    <button type="submit">Sign in</button>
  </form>
</main>
<script src="/static/signin.js"></script>
</body>
</html>
"""
    )


def _signin_failed(heading: str, advice: str, again: str) -> str:
    return (
        _HEAD.format(title=f"{heading} — crisscross", more="")
        + f"""<body>
<main class="narrow">
  <h1>{heading}</h1>
  <p class="error" role="alert">That token signs nobody in. {advice}</p>
  <p><a href="{again}">Try again</a></p>
</main>
</body>
</html>
"""
    )


SIGNIN_HTML = _signin("Sign in", "Open the sign-in link you were given, or paste the token from it.", "/signin")
SIGNIN_FAILED_HTML = _signin_failed("Sign in", "Ask whoever runs the round for a new link.", "/signin")
OPERATOR_SIGNIN_HTML = _signin(
    "Operator sign-in", "Open the operator link crisscross serve add-operator printed, or paste the token from it.", "/operator/signin"
)
OPERATOR_SIGNIN_FAILED_HTML = _signin_failed(
    "Operator sign-in", "Make a new link with crisscross serve add-operator NAME --new-token.", "/operator/signin"
)

SIGNIN_JS = """"use strict";
// The link carries the token in its #fragment, which browsers never send to a server: post it.
(function () {
  const match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
  if (!match) return;
  history.replaceState(null, "", window.location.pathname);
  document.getElementById("token").value = decodeURIComponent(match[1]);
  document.getElementById("signin").submit();
})();
"""

RATER_CSS = """*,*::before,*::after{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232b;background:#f4f5f7;overflow-wrap:anywhere}
.bar{display:flex;gap:1rem;align-items:center;padding:.6rem 1rem;background:#24344d;color:#fff}
.bar .brand{font-weight:600}.bar #who{flex:1;opacity:.85}
.bar form{margin:0}
button{font:inherit;cursor:pointer;border-radius:6px;border:1px solid #24344d;background:#24344d;color:#fff;padding:.55rem 1.1rem}
button.secondary{background:#fff;color:#24344d}
button.link{background:none;border:none;color:inherit;text-decoration:underline;padding:0}
main{max-width:60rem;margin:0 auto;padding:1rem}
main.narrow{max-width:28rem}
input[type=password]{display:block;width:100%;font:inherit;padding:.5rem;margin:.3rem 0 1rem}
h1,h2{line-height:1.2}h2{font-size:1.05rem;margin:1rem 0 .5rem}
.card{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:1rem;margin:0 0 1rem}
details.instructions summary{cursor:pointer;font-weight:600}
.pre{white-space:pre-wrap}
.progress{display:flex;gap:.75rem;align-items:center;margin:0 0 1rem}
.progress progress{flex:1;min-width:0;height:.8rem}
.pair{display:grid;grid-template-columns:1fr;gap:1rem}
@media (min-width:40rem){.pair{grid-template-columns:1fr 1fr}}
.side{min-width:0}
.side .label{font-size:.85rem;color:#5a6472;margin:0 0 .25rem}
.side .caption{margin:0;padding:.75rem;background:#f7f8fa;border-left:4px solid #24344d;font-size:1.1rem}
.side img{display:block;max-width:100%;height:auto;border-radius:4px}
.examples .example{border-top:1px solid #e4e7ec;padding:.75rem 0}
.examples .example:first-of-type{border-top:0}
.examples .pair{gap:.5rem}.examples img{max-height:12rem;width:auto}
.examples .verdict{margin:.5rem 0 0;font-style:italic}
.question{font-weight:600;margin:1rem 0 .5rem}
.scale{position:relative;margin:1rem 0 .5rem}
.scale input[type=range]{display:block;width:calc(100% * 5 / 6);margin:0 calc(100% / 12);height:2rem;-webkit-appearance:none;appearance:none;background:transparent}
.scale input[type=range]::-webkit-slider-runnable-track{height:.5rem;background:#cfd4dc;border-radius:.25rem}
.scale input[type=range]::-moz-range-track{height:.5rem;background:#cfd4dc;border-radius:.25rem}
.scale input[type=range]::-webkit-slider-thumb{-webkit-appearance:none;width:1.4rem;height:1.4rem;margin-top:-.45rem;border-radius:50%;background:#24344d;border:2px solid #fff;box-shadow:0 0 0 1px #24344d}
.scale input[type=range]::-moz-range-thumb{width:1.2rem;height:1.2rem;border-radius:50%;background:#24344d;border:2px solid #fff}
.scale input[type=range]:focus-visible{outline:2px solid #24344d;outline-offset:4px}
.scale input.unset::-webkit-slider-thumb{opacity:0}
.scale input.unset::-moz-range-thumb{opacity:0}
.ticks{list-style:none;margin:.25rem 0 0;padding:0;display:grid;grid-template-columns:repeat(6,minmax(0,1fr));gap:.2rem}
.ticks li{font-size:.78rem;text-align:center;color:#3a4350;min-width:0;position:static}
.ticks li b{display:block;font-size:.95rem}
.ticks .tip{display:none;position:absolute;left:0;right:0;top:100%;margin-top:.25rem;padding:.5rem .75rem;background:#1d232b;color:#fff;border-radius:6px;text-align:left;z-index:2;font-size:.85rem}
.ticks li.hover{cursor:help;text-decoration:underline dotted}
.ticks li.hover:hover .tip,.ticks li.hover:focus .tip{display:block}
.legend{display:none;list-style:none;margin:.5rem 0 0;padding:0;font-size:.85rem;color:#3a4350}
@media (max-width:30rem){.ticks .short{display:none}.legend{display:block}}
.answers{border:0;padding:0;margin:1rem 0 .5rem}
.answers label{display:block;padding:.6rem .75rem;margin:.4rem 0;border:1px solid #d8dce3;border-radius:6px;background:#fff;cursor:pointer}
.answers label:has(input:checked){border-color:#24344d;background:#e9eef6}
.answers .meaning{display:block;font-size:.85rem;color:#5a6472;margin-left:1.6rem}
.nav{display:flex;gap:.75rem;flex-wrap:wrap;justify-content:space-between;margin-top:1rem}
.error{color:#a1121b;font-weight:600;min-height:1.45em;margin:.5rem 0}
.done{font-size:1.1rem}
"""

# Both pages' scripts build every element with this: attributes one by one (``text`` as textContent,
# never HTML), children appended, a null child (a section a batch lacks) left out.
_EL_JS = """  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) if (child !== null && child !== undefined) node.append(child);
    return node;
  }
"""

RATER_JS = (
    """"use strict";
(function () {
  const app = document.getElementById("app");
  let view = null;   // the server's answer to /api/batch
  let state = null;  // {index, answers[], seconds[], shownAt}

"""
    + _EL_JS
    + """
  async function load() {
    const response = await fetch("/api/batch", {credentials: "same-origin", cache: "no-store"});
    if (response.status === 401) { window.location.assign("/signin"); return; }
    if (!response.ok) { showError("The server could not give you a batch (" + response.status + "). Try again in a moment."); return; }
    view = await response.json();
    document.getElementById("who").textContent = view.rater;
    app.dataset.batch = view.batch ? view.batch.id : "none";  // what is on screen, for tests and styles
    if (!view.batch) { renderDone(); return; }
    const saved = restore(view.batch.id);
    const n = view.batch.items.length;
    state = saved || {index: 0, answers: new Array(n).fill(null), seconds: new Array(n).fill(0)};
    render();
  }

  function storageKey(id) { return "crisscross:" + view.rater + ":" + id; }
  function save() { try { sessionStorage.setItem(storageKey(view.batch.id), JSON.stringify(state)); } catch (e) { /* private mode */ } }
  function restore(id) {
    try { const text = sessionStorage.getItem(storageKey(id)); return text ? JSON.parse(text) : null; } catch (e) { return null; }
  }

  function renderDone() {
    app.replaceChildren(el("div", {class: "card done"}, [
      el("p", {text: "No batch is waiting for you right now. Thank you!"}),
      el("p", {text: "Come back later, or reload the page to check again."}),
    ]));
  }

  function showError(message) {
    const box = document.getElementById("error");
    if (box) box.textContent = message; else app.replaceChildren(el("p", {class: "error", role: "alert", text: message}));
  }

  function side(value, label) {
    const body = value.text !== undefined
      ? el("p", {class: "caption", text: value.text})
      : el("img", {src: value.image, alt: label});
    return el("div", {class: "side"}, [el("p", {class: "label", text: label}), body]);
  }

  function pair(item, labels) { return el("div", {class: "pair"}, [side(item.a, labels[0]), side(item.b, labels[1])]); }

  function instructions(batch) {
    return el("section", {class: "card", "aria-label": "Instructions"}, [
      el("p", {class: "pre", text: batch.summary}),
      el("details", {class: "instructions"}, [
        el("summary", {text: "Detailed instructions (click to show/hide)"}),
        el("div", {class: "pre", text: batch.instructions}),
      ]),
    ]);
  }

  function examples(batch) {
    if (!batch.examples.length) return null;
    return el("section", {class: "card examples", "aria-label": "Worked examples"}, [
      el("h2", {text: "Worked examples"}),
      ...batch.examples.map((example) => el("div", {class: "example"}, [
        pair(example, batch.labels),
        el("p", {class: "verdict", text: example.verdict}),
      ])),
    ]);
  }

  function slider(batch, current) {
    const scale = batch.scale;
    const input = el("input", {type: "range", min: String(scale.min), max: String(scale.max), step: "0.01",
                               "aria-label": "Similarity score from " + scale.min + " to " + scale.max});
    input.value = current === null ? String((scale.min + scale.max) / 2) : String(current.score);
    if (current === null) input.classList.add("unset");
    input.addEventListener("input", () => {
      input.classList.remove("unset");
      setAnswer({score: Number(input.value)});
    });
    const ticks = el("ol", {class: "ticks"}, scale.points.map((point) => {
      const tip = scale.hover ? el("span", {class: "tip", role: "tooltip", text: "(" + point.score + ") " + point.description}) : null;
      const attrs = scale.hover ? {class: "hover", tabindex: "0"} : {title: point.description};
      return el("li", attrs, [el("b", {text: String(point.score)}), el("span", {class: "short", text: point.label}), tip]);
    }));
    // On a phone the labels do not fit under the scale: they are listed beneath it instead.
    const legend = el("ol", {class: "legend", "aria-hidden": "true"},
      scale.points.map((point) => el("li", {}, [el("b", {text: String(point.score) + " "}), point.label])));
    return el("div", {class: "scale"}, [input, ticks, legend]);
  }

  // A type's fixed answers come with the batch (VERIFY's four); an item may bring its own options
  // (CHOOSE: the target's captions by number, shown as text; VERIFY-TRIPLE: image 1, image 2, both, neither).
  function choices(options, current) {
    return el("fieldset", {class: "answers"}, [
      el("legend", {class: "question", text: "Your answer"}),
      ...options.map((choice) => {
        const input = el("input", {type: "radio", name: "answer", value: choice.answer});
        input.checked = current !== null && current.answer === choice.answer;
        input.addEventListener("change", () => setAnswer({answer: choice.answer}));
        const meaning = choice.meaning ? el("span", {class: "meaning", text: choice.meaning}) : null;
        return el("label", {}, [input, " ", el("span", {class: "option", text: choice.text || choice.answer}), meaning]);
      }),
    ]);
  }

  function shown(item, labels) {
    if (!item.images) return pair(item, labels);
    return el("div", {}, [
      el("div", {class: "pair"}, [side(item.a, labels[0])]),
      el("div", {class: "pair"}, item.images.map((image) => side(image, image.label))),
    ]);
  }

  function setAnswer(value) {
    state.answers[state.index] = value;
    document.getElementById("error").textContent = "";
    save();
  }

  function leaveItem() {
    const now = performance.now();
    if (state.shownAt !== undefined && state.shownAt !== null) state.seconds[state.index] += (now - state.shownAt) / 1000;
    state.shownAt = null;
    save();
  }

  function render() {
    const batch = view.batch;
    const n = batch.items.length;
    const item = batch.items[state.index];
    const current = state.answers[state.index];
    const last = state.index === n - 1;
    const control = batch.scale ? slider(batch, current) : choices(item.options || batch.answers, current);
    const back = el("button", {type: "button", class: "secondary", text: "Back"});
    back.disabled = state.index === 0;
    back.addEventListener("click", () => { leaveItem(); state.index -= 1; render(); });
    const next = el("button", {type: "button", id: last ? "submit" : "next", text: last ? "Submit batch" : "Next"});
    next.addEventListener("click", () => (last ? submit() : advance()));
    app.replaceChildren(...[  // BISON's types have no worked examples: no section, not a "null"
      instructions(batch),
      examples(batch),
      el("section", {class: "card task", "aria-label": "Pair to rate"}, [
        el("div", {class: "progress"}, [
          el("span", {id: "position", text: "Item " + (state.index + 1) + " of " + n}),
          el("progress", {max: String(n), value: String(state.answers.filter((a) => a !== null).length)}),
        ]),
        shown(item, batch.labels),
        batch.question ? el("p", {class: "question", text: batch.question}) : null,
        control,
        el("p", {id: "error", class: "error", role: "alert"}),
        el("div", {class: "nav"}, [back, next]),
      ]),
    ].filter((part) => part !== null));
    state.shownAt = performance.now();
  }

  function missing() {
    return view.batch.scale ? "Move the slider to give a score before going on." : "Choose an answer before going on.";
  }

  function advance() {
    if (state.answers[state.index] === null) { showError(missing()); return; }
    leaveItem();
    state.index += 1;
    render();
    window.scrollTo(0, 0);
  }

  async function submit() {
    if (state.answers[state.index] === null) { showError(missing()); return; }
    const gap = state.answers.findIndex((a) => a === null);
    if (gap >= 0) { showError("Item " + (gap + 1) + " has no answer yet: go back to it."); return; }
    leaveItem();
    const batch = view.batch;
    // a time over the limit means the item was left open, not looked at: the page sends no time for it
    const timed = (i) => (state.seconds[i] <= batch.max_seconds ? state.seconds[i] : null);
    const answers = batch.items.map((item, i) => Object.assign({position: item.position, seconds: timed(i)}, state.answers[i]));
    const button = document.getElementById("submit");
    button.disabled = true;
    const response = await fetch("/api/submit", {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": view.csrf},
      body: JSON.stringify({batch_id: batch.id, answers: answers}),
    });
    if (response.ok) {
      delete app.dataset.batch;
      try { sessionStorage.removeItem(storageKey(batch.id)); } catch (e) { /* private mode */ }
      app.replaceChildren(el("p", {class: "card", text: "Batch submitted. Loading the next one…"}));
      await load();
      window.scrollTo(0, 0);
      return;
    }
    let detail = "the server refused the batch (" + response.status + ")";
    try { const body = await response.json(); if (typeof body.detail === "string") detail = body.detail; } catch (e) { /* not JSON */ }
    state.shownAt = performance.now();
    button.disabled = false;
    showError("Not submitted: " + detail);
  }

  document.addEventListener("visibilitychange", () => {
    if (!state || !view || !view.batch) return;
    if (document.hidden) leaveItem(); else state.shownAt = performance.now();
  });

  load();
})();
"""
)

OPERATOR_HTML = (
    _HEAD.format(title="Campaign — crisscross", more='\n<link rel="stylesheet" href="/static/operator.css">')
    + """<body>
<header class="bar">
  <span class="brand">Campaign</span>
  <span id="who"></span>
  <span id="updated"></span>
  <form method="post" action="/operator/signout"><button type="submit" class="link">Sign out</button></form>
</header>
<main id="campaign" class="wide">
  <p id="error" class="error" role="alert"></p>
  <section class="card" id="summary" aria-label="At a glance"><h2>At a glance</h2><div class="body"><p>Loading…</p></div></section>
  <section class="card" id="progress" aria-label="Progress"><h2>Progress per task type</h2><div class="body"></div></section>
  <section class="card" id="pace" aria-label="Judgments per hour"><h2>Judgments per hour</h2><div class="body"></div></section>
  <section class="card" id="stops" aria-label="Stop rule"><h2>Items closed by the stop rule</h2><div class="body"></div></section>
  <section class="card" id="machine" aria-label="Machine share"><h2>The machine's share</h2><div class="body"></div></section>
  <section class="card" id="raters" aria-label="Raters"><h2>Raters and the QC rules</h2><div class="body"></div></section>
  <section class="card" id="budget" aria-label="Budget"><h2>Budget</h2><div class="body"></div></section>
</main>
<script src="/static/operator.js"></script>
</body>
</html>
"""
)

OPERATOR_CSS = """main.wide{max-width:76rem}
.bar #updated{font-size:.85rem;opacity:.8}
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(9rem,1fr));gap:.75rem;margin:0}
.figures div{background:#f7f8fa;border-radius:6px;padding:.5rem .75rem}
.figures dt{font-size:.8rem;color:#5a6472}.figures dd{margin:0;font-size:1.4rem;font-weight:600}
.scroll{overflow-x:auto}
table{width:100%;border-collapse:collapse;font-size:.92rem}
th,td{padding:.35rem .5rem;border-bottom:1px solid #e4e7ec;text-align:left;vertical-align:top;overflow-wrap:normal}
tbody th{font-size:inherit;color:inherit;white-space:nowrap}
td[data-field=type]{white-space:nowrap}
td.verdict{overflow-wrap:anywhere}
#error:empty{display:none}
th{font-size:.8rem;color:#5a6472;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td progress{width:100%;min-width:5rem;height:.7rem}
tr.excluded th,tr.excluded td{background:#fdf0f0}
.verdict.excluded{color:#a1121b;font-weight:600}
.note{color:#5a6472;font-size:.88rem;margin:.5rem 0 0}
ol.closures{margin:.5rem 0 0;padding-left:1.2rem;font-size:.88rem}
"""

OPERATOR_JS = (
    """"use strict";
// The operator page: /api/operator/campaign read every few seconds, every value set as text.
// A slow answer spaces the polls out (SLOWER times its time, up to MOST_MS), as does a failing app,
// so a busy server is not asked again before it has caught up.
(function () {
  const EVERY_MS = 5000;
  const MOST_MS = 60000;
  const SLOWER = 10;
  let failures = 0;
  const main = document.getElementById("campaign");

"""
    + _EL_JS
    + """
  // Numbers as the tests read them back: thousands with commas, fixed decimals.
  function int(n) { return String(n).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ","); }
  function fixed(x, digits) {
    const [whole, part] = x.toFixed(digits).split(".");
    return int(whole) + (part === undefined ? "" : "." + part);
  }
  function money(x, currency) { return x === null ? "not priced (the pilot had no times)" : fixed(x, 2) + " " + currency; }
  function clock(iso) { return iso.slice(11, 16) + " UTC"; }

  function cell(field, text, numeric) { return el("td", {"data-field": field, class: numeric ? "num" : "", text: text}); }
  function table(headers, rows, numeric) {
    return el("div", {class: "scroll"}, [el("table", {}, [
      el("thead", {}, [el("tr", {}, headers.map((h, i) => el("th", {scope: "col", class: numeric.includes(i) ? "num" : "", text: h})))]),
      el("tbody", {}, rows),
    ])]);
  }
  function fill(id, parts) { document.querySelector("#" + id + " .body").replaceChildren(...parts.filter((p) => p !== null)); }
  function note(text, field) { return el("p", field ? {class: "note", "data-field": field, text: text} : {class: "note", text: text}); }

  function summary(view) {
    const figure = (field, label, value) => el("div", {}, [el("dt", {text: label}), el("dd", {"data-field": field, text: value})]);
    const excluded = view.raters.filter((r) => r.excluded).length;
    fill("summary", [el("dl", {class: "figures"}, [
      figure("judgments", "judgments so far", int(view.pace.judgments)),
      figure("last_hour", "in the last hour", int(view.pace.last_hour)),
      figure("raters", "raters", int(new Set(view.raters.map((r) => r.worker)).size)),
      figure("closed", "items closed early", int(view.progress.reduce((sum, p) => sum + p.closed, 0))),
      figure("excluded", "excluded by QC (rater × type)", int(excluded)),
    ])]);
  }

  function progress(view) {
    const rows = view.progress.map((p) => el("tr", {"data-type": p.task_type}, [
      el("th", {scope: "row", text: p.task_type}),
      cell("items", int(p.items_done) + " / " + int(p.items_planned), true),
      cell("judgments", int(p.judgments_rated) + " / " + int(p.judgments_planned), true),
      el("td", {}, [el("progress", {max: String(Math.max(p.judgments_planned, 1)), value: String(Math.min(p.judgments_rated, p.judgments_planned))})]),
      cell("batches", int(p.done) + " done · " + int(p.assigned) + " assigned · " + int(p.open) + " open", true),
      cell("against", p.against === "plan" ? "the plan: " + p.replicas + " raters an item" : "the tasks: " + p.replicas + " raters an item"),
    ]));
    const planned = view.progress.some((p) => p.against === "plan");
    fill("progress", [
      table(["type", "items done / planned", "judgments / planned", "", "batches", "counted against"], rows, [1, 2, 4]),
      note(planned ? "Planned: the plan's items × replicas per type (serve --plan). Judgments of rated items; gold apart."
                   : "No plan given (serve --plan): counted against the loaded tasks. Judgments of rated items; gold apart."),
    ]);
  }

  function pace(view) {
    // the clock hours since the first judgment's (ISO times of one form compare as text)
    const first = view.pace.first === null ? null : view.pace.first.slice(0, 13);
    const hours = view.pace.hours.filter((h) => first !== null && h.hour.slice(0, 13) >= first);
    const most = Math.max(1, ...hours.map((h) => h.judgments));
    const rows = hours.map((h) => el("tr", {"data-hour": h.hour}, [
      el("th", {scope: "row", text: clock(h.hour)}),
      cell("count", int(h.judgments), true),
      el("td", {}, [el("progress", {max: String(most), value: String(h.judgments)})]),
    ]));
    fill("pace", [
      el("p", {}, [
        el("span", {"data-field": "last_hour", text: int(view.pace.last_hour)}), " in the last hour; ",
        el("span", {"data-field": "per_hour", text: view.pace.per_hour === null ? "none yet" : fixed(view.pace.per_hour, 1)}),
        " an hour since the first judgment",
        view.pace.first === null ? "" : " (" + view.pace.first.slice(0, 16).replace("T", " ") + " UTC).",
      ]),
      rows.length ? table(["hour started", "judgments", ""], rows, [1]) : null,
    ]);
  }

  function stops(view) {
    const rule = view.stops.rule;
    const rows = view.progress.map((p) => el("tr", {"data-type": p.task_type}, [
      el("th", {scope: "row", text: p.task_type}),
      cell("closed", int(p.closed) + " / " + int(p.items), true),
      cell("saved", int(p.saved), true),
    ]));
    const recent = view.stops.recent.map((c) => el("li", {"data-item": c.item_id}, [
      el("code", {text: c.item_id}), " (" + c.task_type + ", " + clock(c.time) + "): ", el("span", {class: "reason", text: c.reason}),
    ]));
    fill("stops", [
      el("p", {}, ["Stop rule: ", el("strong", {"data-field": "rule", text: rule}),
                   rule === "fixed" ? " — every item gets its replicas; none closes early." : " — an item closes once its label is decided."]),
      table(["type", "items closed / rated items", "judgments saved"], rows, [1, 2]),
      recent.length ? el("ol", {class: "closures", "aria-label": "Latest closures"}, recent) : null,
    ]);
  }

  function machine(view) {
    if (view.machine === null) {
      fill("machine", [note("No machine triage applies: the app was started without --triage, so people decide every item.", "none")]);
      return;
    }
    const rows = view.machine.map((m) => el("tr", {"data-type": m.task_type}, [
      el("th", {scope: "row", text: m.task_type}),
      cell("items", int(m.items), true),
      cell("machine", int(m.machine), true),
      cell("share", m.items ? fixed(100 * m.machine / m.items, 1) + "%" : "—", true),
      cell("people", int(m.people), true),
      cell("open", int(m.open), true),
    ]));
    fill("machine", [
      table(["type", "items", "labelled by the machine", "machine's share", "decided by people", "still for people"], rows, [1, 2, 3, 4, 5]),
      note("From the triage output's decisions.parquet (serve --triage)."),
    ]);
  }

  function raters(view) {
    if (!view.raters.length) { fill("raters", [note("Nobody has submitted a batch yet.", "none")]); return; }
    const rows = view.raters.map((r) => el("tr", {"data-rater": r.worker, "data-type": r.task_type, class: r.excluded ? "excluded" : ""}, [
      el("th", {scope: "row", "data-field": "worker", text: r.worker}),
      cell("type", r.task_type),
      cell("judgments", int(r.judgments), true),
      cell("gold", r.gold_seen ? r.gold_passed + "/" + r.gold_seen + " (" + fixed(100 * r.gold_accuracy, 0) + "%)" : "no gold yet", true),
      cell("agreement", r.loo_correlation === null ? "—" : "r " + fixed(r.loo_correlation, 2) + " over " + int(r.loo_items), true),
      cell("seconds", r.median_seconds === null ? "—" : fixed(r.median_seconds, 1) + " s", true),
      el("td", {"data-field": "verdict", class: "verdict" + (r.excluded ? " excluded" : ""), text: r.excluded ? "excluded: " + r.reasons : "kept"}),
    ]));
    fill("raters", [
      table(["rater", "type", "judgments", "gold passed", "agreement (leave-one-out)", "median time an item", "QC verdict"], rows, [2, 3, 4, 5]),
      note("The aggregate stage's rules (aggregate.rules); a statistic counts once it rests on enough judgments, so early verdicts are mild."),
      note("Worked out at " + view.raters_as_of.slice(11, 19) + " UTC: the QC report is rebuilt as judgments come in, not at every poll.", "as_of"),
    ]);
  }

  function budget(view) {
    const b = view.budget;
    if (b === null) {
      fill("budget", [note("No plan given (serve --plan): there is no budget to count against. People have made "
                           + int(view.pace.judgments) + " judgments.", "none")]);
      return;
    }
    const rows = b.types.map((t) => el("tr", {"data-type": t.task_type}, [
      el("th", {scope: "row", text: t.task_type}),
      cell("allowed", int(t.judgments) + (t.from_budget ? "" : " (the design)"), true),
      cell("per_judgment", t.cost_per_judgment === null ? "—" : fixed(t.cost_per_judgment, 4) + " " + t.currency, true),
      cell("spent", int(t.spent_judgments) + " · " + money(t.spent_cost, t.currency), true),
      cell("left", int(t.left_judgments) + " · " + money(t.left_cost, t.currency), true),
    ]));
    const total = b.total;
    rows.push(el("tr", {"data-type": "total", class: "total"}, [
      el("th", {scope: "row", text: "total"}),
      cell("allowed", int(total.judgments), true),
      cell("per_judgment", "", true),
      cell("spent", int(total.spent_judgments), true),
      cell("left", int(total.left_judgments) + (total.left_cost === null ? "" : " · " + money(total.left_cost, total.currency)), true),
    ]));
    fill("budget", [
      table(["type", "judgments allowed", "cost of a judgment", "spent", "left"], rows, [1, 2, 3, 4]),
      note("The plan's budget per type (its design where it sets none) at the pilot's time per judgment and the plan's pay; "
           + "spent counts every judgment people made, gold included."),
      total.unplanned_judgments ? note(int(total.unplanned_judgments) + " judgments are of types the plan does not name.", "unplanned") : null,
    ]);
  }

  function showError(text) { document.getElementById("error").textContent = text; }

  function again(took, failed) {
    failures = failed ? failures + 1 : 0;
    const wait = Math.round(Math.min(MOST_MS, Math.max(EVERY_MS * 2 ** Math.min(failures, 4), SLOWER * took)));
    main.dataset.wait = String(wait);  // the next poll's delay, for tests
    window.setTimeout(load, wait);
  }

  async function load() {
    const started = performance.now();
    let response;
    try {
      response = await fetch("/api/operator/campaign", {credentials: "same-origin", cache: "no-store"});
    } catch (e) {
      showError("The app did not answer; trying again.");
      again(performance.now() - started, true);
      return;
    }
    if (response.status === 401) { window.location.assign("/operator/signin"); return; }
    if (!response.ok) {
      let detail = "the app refused (" + response.status + ")";
      try { const body = await response.json(); if (typeof body.detail === "string") detail = body.detail; } catch (e) { /* not JSON */ }
      showError(detail);
      if (response.status !== 403) again(performance.now() - started, true);
      return;
    }
    const view = await response.json();
    showError("");
    document.getElementById("who").textContent = view.operator;
    document.getElementById("updated").textContent = "updated " + view.time.slice(11, 19) + " UTC";
    summary(view); progress(view); pace(view); stops(view); machine(view); raters(view); budget(view);
    main.dataset.updated = view.time;  // what is on screen, for tests
    main.dataset.qc = view.raters_as_of;
    again(performance.now() - started, false);
  }

  load();
})();
"""
)

# name → (body, media type) for /static/<name>
STATIC: dict[str, tuple[str, str]] = {
    "rater.css": (RATER_CSS, "text/css; charset=utf-8"),
    "rater.js": (RATER_JS, "text/javascript; charset=utf-8"),
    "signin.js": (SIGNIN_JS, "text/javascript; charset=utf-8"),
    "operator.css": (OPERATOR_CSS, "text/css; charset=utf-8"),
    "operator.js": (OPERATOR_JS, "text/javascript; charset=utf-8"),
}
