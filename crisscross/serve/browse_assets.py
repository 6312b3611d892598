"""The release browser's own HTML, CSS and JavaScript (no CDN, nothing fetched from elsewhere).

As on the rater page, the script builds every element with ``textContent`` and ``setAttribute``;
no value of the release (a caption, a rater's pseudonym, a reason) goes through ``innerHTML``.
The filters, the page and the open pair live in the address's query string, so a view is a link
to share or reload; paging keeps the filters last shown, and an answer overtaken by a newer request
is dropped.
"""

from __future__ import annotations

BROWSE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Release — crisscross</title>
<link rel="stylesheet" href="/static/browse.css">
</head>
<body>
<header class="bar"><span class="brand">crisscross release</span><span id="release"></span><span id="banner"></span></header>
<main>
  <details id="plots" class="card"><summary>The card's plots</summary><div id="plot-list"></div></details>
  <form id="filters" class="card filters">
    <label>Task type <select name="task_type" id="f-task_type"><option value="">any</option></select></label>
    <label>Split <select name="split" id="f-split"><option value="">any</option></select></label>
    <label>Sampling method <select name="method" id="f-method"><option value="">any</option></select></label>
    <label>Labelled by <select name="labelled_by" id="f-labelled_by"><option value="">any</option></select></label>
    <label>Positive <select name="positive" id="f-positive"><option value="">any</option><option value="yes">yes</option>
      <option value="no">no</option></select></label>
    <label>Score from <input name="score_min" id="f-score_min" type="number" min="0" max="5" step="0.1"></label>
    <label>to <input name="score_max" id="f-score_max" type="number" min="0" max="5" step="0.1"></label>
    <label>Sort by <select name="sort" id="f-sort"></select></label>
    <label>Order <select name="order" id="f-order"><option value="asc">ascending</option>
      <option value="desc">descending</option></select></label>
    <button type="submit">Show</button>
  </form>
  <p id="count" role="status"></p>
  <p id="error" class="error" role="alert" hidden></p>
  <table id="pairs"><thead><tr><th>#</th><th>type</th><th>method</th><th>first</th><th>second</th><th>score</th>
    <th>positive</th><th>labelled by</th><th>n</th><th></th></tr></thead><tbody></tbody></table>
  <nav class="pager"><button type="button" id="prev" class="secondary">Previous</button>
    <span id="where"></span><button type="button" id="next" class="secondary">Next</button></nav>
  <section id="pair" class="card" hidden aria-live="polite"></section>
</main>
<script src="/static/browse.js"></script>
</body>
</html>
"""

BROWSE_CSS = """*,*::before,*::after{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232b;background:#f4f5f7;overflow-wrap:anywhere}
.bar{display:flex;gap:1rem;align-items:center;padding:.6rem 1rem;background:#24344d;color:#fff}
.bar .brand{font-weight:600}#banner{font-weight:700;color:#ffd479}
main{max-width:90rem;margin:0 auto;padding:1rem}
.card{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:.8rem 1rem;margin:0 0 1rem}
.filters{display:flex;flex-wrap:wrap;gap:.6rem 1rem;align-items:end}
.filters label{display:flex;flex-direction:column;font-size:.8rem;color:#3a4350}
select,input{font:inherit;padding:.3rem}input[type=number]{width:6rem}
button{font:inherit;cursor:pointer;border-radius:6px;border:1px solid #24344d;background:#24344d;color:#fff;padding:.4rem .9rem}
button.secondary{background:#fff;color:#24344d}button:disabled{opacity:.4;cursor:default}
table{width:100%;border-collapse:collapse;background:#fff}
th,td{text-align:left;vertical-align:top;padding:.4rem;border-bottom:1px solid #e4e7ec}
td.side{width:28%}td.side img{display:block;max-width:100%;max-height:9rem;border-radius:4px}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.caption{margin:0}.missing{color:#8a93a0;font-style:italic}
.pager{display:flex;gap:1rem;align-items:center;justify-content:center;margin:1rem 0}
#plot-list{display:flex;flex-wrap:wrap;gap:1rem}#plot-list img{max-width:100%;height:auto}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.sides img{max-width:100%;height:auto}
#pair{position:fixed;top:0;right:0;width:min(46rem,100%);height:100vh;overflow:auto;margin:0;border-radius:0;
  box-shadow:-6px 0 24px rgba(0,0,0,.25);z-index:10}
#pair .close{float:right}
.bars{display:grid;grid-auto-flow:column;grid-auto-columns:3rem;gap:4px;align-items:end;height:5rem;margin:.5rem 0 0}
.bars span{background:#24344d;min-height:1px}
.bar-labels{display:grid;grid-auto-flow:column;grid-auto-columns:3rem;gap:4px;font-size:.8rem;text-align:center;color:#3a4350}
.error{color:#9b1c1c}
"""

BROWSE_JS = r""""use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const FIELDS = ["task_type", "split", "method", "labelled_by", "positive", "score_min", "score_max", "sort", "order"];
  const LIMIT = 50;
  let applied = new URLSearchParams();  // the filters last shown: paging keeps them, whatever the form holds since
  let offset = 0;
  let total = 0;
  let openKey = null;
  let shown = 0;  // the latest page asked for: an older answer arriving late is dropped

  function fail(error) { $("error").textContent = error.message; $("error").hidden = false; }

  function address() {
    const params = new URLSearchParams(applied);
    if (offset > 0) params.set("offset", String(offset));
    if (openKey !== null) params.set("pair", String(openKey));
    history.replaceState(null, "", "?" + params.toString());
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function option(select, value, label) {
    const node = el("option", label);
    node.setAttribute("value", value);
    select.appendChild(node);
  }

  async function json(url) {
    const response = await fetch(url, {credentials: "same-origin"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.detail || response.statusText);
    return body;
  }

  function query() {
    const params = new URLSearchParams();
    for (const name of FIELDS) {
      const value = $("f-" + name).value;
      if (value !== "") params.set(name, value);
    }
    return params;
  }

  function side(node, s, images, size) {
    if (s.kind === "img") {
      if (!images) { node.appendChild(el("span", s.published, "missing")); return; }
      const img = el("img");
      img.setAttribute("src", "/api/image?id=" + encodeURIComponent(s.id) + "&size=" + size);
      img.setAttribute("alt", s.published);
      img.setAttribute("loading", "lazy");
      node.appendChild(img);
    } else if (s.text === null) {
      node.appendChild(el("p", s.published + " (no text in this release)", "caption missing"));
    } else {
      node.appendChild(el("p", s.text, "caption"));
    }
  }

  function score(value) { return value === null ? "—" : Number(value).toFixed(2); }

  async function show(release) {
    $("error").hidden = true;
    const params = new URLSearchParams(applied);
    params.set("offset", String(offset));
    params.set("limit", String(LIMIT));
    const asked = ++shown;
    let page;
    try { page = await json("/api/pairs?" + params.toString()); } catch (error) { fail(error); return; }
    if (asked !== shown) return;
    address();
    total = page.total;
    const body = $("pairs").tBodies[0];
    body.replaceChildren();
    for (const row of page.rows) {
      const tr = el("tr");
      tr.setAttribute("data-key", String(row.key));
      tr.appendChild(el("td", row.key, "num"));
      tr.appendChild(el("td", row.task_type));
      tr.appendChild(el("td", row.sampling_method === null ? "—" : row.sampling_method));
      for (const s of row.sides) { const td = el("td", null, "side"); side(td, s, release.images, "thumb"); tr.appendChild(td); }
      tr.appendChild(el("td", row.label === null ? score(row.score) : row.label, "num score"));
      tr.appendChild(el("td", row.positive ? "yes" : "no", "positive"));
      tr.appendChild(el("td", row.labelled_by, "by"));
      tr.appendChild(el("td", row.n === null ? "—" : row.n, "num"));
      const open = el("button", "Open", "secondary open");
      open.setAttribute("type", "button");
      open.addEventListener("click", () => openPair(row.key, release));
      const td = el("td"); td.appendChild(open); tr.appendChild(td);
      body.appendChild(tr);
    }
    $("count").textContent = total.toLocaleString("en-US") + " pairs match";
    const last = Math.min(offset + page.rows.length, total);
    $("where").textContent = total ? (offset + 1) + "–" + last + " of " + total.toLocaleString("en-US") : "none";
    $("prev").disabled = offset === 0;
    $("next").disabled = offset + LIMIT >= total;
  }

  function table(section, header, rows) {
    const t = el("table");
    const head = el("tr");
    for (const h of header) head.appendChild(el("th", h));
    t.appendChild(head);
    for (const r of rows) { const tr = el("tr"); for (const c of r) tr.appendChild(el("td", c)); t.appendChild(tr); }
    section.appendChild(t);
    return t;
  }

  async function openPair(key, release) {
    let pair;
    try { pair = await json("/api/pairs/" + key); } catch (error) { fail(error); return; }
    openKey = pair.key;
    const section = $("pair");
    section.replaceChildren();
    const close = el("button", "Close", "secondary close");
    close.setAttribute("type", "button");
    close.addEventListener("click", () => { section.hidden = true; openKey = null; address(); });
    section.appendChild(close);
    section.appendChild(el("h2", "Pair " + pair.key + ": " + pair.task_type + " (" + pair.labelled_by + ")"));
    section.appendChild(el("p", pair.item_id, "item"));
    const sides = el("div", null, "sides");
    for (const s of pair.sides) { const d = el("div"); side(d, s, release.images, "full"); sides.appendChild(d); }
    section.appendChild(sides);
    const facts = [["score", pair.label === null ? score(pair.score) : pair.label], ["positive", pair.positive ? "yes" : "no"],
                   ["sampling method", pair.sampling_method === null ? "—" : pair.sampling_method],
                   ["judgments kept", pair.spread.kept], ["std", pair.std === null ? "—" : score(pair.std)]];
    table(section, ["", ""], facts).className = "facts";
    section.appendChild(el("h3", "Spread"));
    const spread = el("div", null, "bars");
    spread.setAttribute("id", "spread");
    const counts = pair.spread.scores.length ? bins(pair.spread.scores) : Object.entries(pair.spread.answers);
    const most = Math.max(1, ...counts.map((c) => c[1]));
    for (const [label, n] of counts) {
      const bar = el("span");
      bar.setAttribute("title", label + ": " + n);
      bar.setAttribute("data-count", String(n));
      bar.style.height = Math.round(100 * n / most) + "%";  // CSSOM: the CSP refuses style attributes
      spread.appendChild(bar);
    }
    section.appendChild(spread);
    const labels = el("div", null, "bar-labels");
    for (const [label] of counts) labels.appendChild(el("span", label));
    section.appendChild(labels);
    section.appendChild(el("p", pair.spread.scores.length ? "scores: " + pair.spread.scores.map(score).join(", ")
      : Object.entries(pair.spread.answers).map((a) => a[0] + " × " + a[1]).join(", ") || "no kept judgments", "spread-text"));
    section.appendChild(el("h3", "Judgments (" + pair.judgments.length + ")"));
    table(section, ["rater", "score", "answer", "seconds", "status", "source"],
      pair.judgments.map((j) => [j.rater, score(j.score), j.answer === null ? "—" : j.answer,
        j.seconds === null ? "—" : j.seconds, j.status, j.source])).setAttribute("id", "judgments");
    if (pair.machine) {
      section.appendChild(el("h3", "Machine label"));
      const m = pair.machine;
      table(section, ["", ""], [["score", m.score], ["cut", m.cut], ["error bound", m.bound], ["audited pairs", m.audited],
        ["expected 0–5 score", m.expected_score], ["reason", m.reason], ["signals", m.signals.join(", ")]])
        .setAttribute("id", "machine");
    }
    section.hidden = false;
    address();
  }

  function bins(scores) {
    const counts = [0, 0, 0, 0, 0, 0];
    for (const s of scores) counts[Math.max(0, Math.min(5, Math.floor(s + 0.5)))] += 1;
    return counts.map((n, i) => [String(i), n]);
  }

  async function start() {
    const release = await json("/api/release");
    $("release").textContent = release.name + " " + release.version + " — " + release.choices.pairs.toLocaleString("en-US") + " pairs";
    if (release.simulated) $("banner").textContent = "SIMULATED";
    for (const field of ["task_type", "split", "method", "labelled_by"]) {
      for (const [value, n] of release.choices[field]) option($("f-" + field), value, value + " (" + n.toLocaleString("en-US") + ")");
    }
    for (const name of release.sorts) option($("f-sort"), name, name);
    for (const name of release.plots) {
      const img = el("img");
      img.setAttribute("src", "/plots/" + encodeURIComponent(name));
      img.setAttribute("alt", name);
      $("plot-list").appendChild(img);
    }
    $("plots").open = release.plots.length > 0;
    const given = new URLSearchParams(window.location.search);
    for (const name of FIELDS) if (given.has(name)) $("f-" + name).value = given.get(name);
    applied = query();
    offset = /^[0-9]+$/.test(given.get("offset") || "") ? Number(given.get("offset")) : 0;
    $("filters").addEventListener("submit", (event) => { event.preventDefault(); applied = query(); offset = 0; show(release); });
    $("prev").addEventListener("click", () => { offset = Math.max(0, offset - LIMIT); show(release); });
    $("next").addEventListener("click", () => { offset += LIMIT; show(release); });
    show(release);
    if (/^[0-9]+$/.test(given.get("pair") || "")) openPair(Number(given.get("pair")), release);
  }

  start().catch(fail);
})();
"""

STATIC: dict[str, tuple[str, str]] = {
    "browse.css": (BROWSE_CSS, "text/css; charset=utf-8"),
    "browse.js": (BROWSE_JS, "text/javascript; charset=utf-8"),
}
