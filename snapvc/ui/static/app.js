// The page of `snapvc ui`: the history as a graph, a commit's changes, a diff of two
// commits, the state at a commit, the history of a path, threads, the reflog, and (when
// the server allows writes) tag / branch / reset / undo. Plain DOM, no dependencies: the
// page loads nothing from outside the server that serves it.
"use strict";

const ROW = 30;          // px per graph row; matches --row in app.css
const LANE = 14;         // px per graph column
const PAGE = 200;        // graph rows asked for at a time
const AROUND = 30;       // rows drawn above and below the visible ones, at least
const CHUNK = 20;
const MAX_LANES = 24;
const COLORS = ["#0969da", "#8250df", "#1a7f37", "#bc4c00", "#cf222e", "#1b7c83", "#9a6700", "#6e7781"];

const $ = (sel, root = document) => root.querySelector(sel);

const app = {
  repo: null,        // the answer of /api/repo
  rows: [],          // graph rows loaded so far, newest first
  index: new Map(),  // commit id -> its row number
  cursor: undefined, // where the next graph page starts (null: no more; undefined: not loaded yet)
  loading: false,
  drawn: "",         // the range of rows in the page, to redraw only when it changes
  current: null,     // the commit shown in the detail pane
  picked: [],        // commits ticked for a diff (at most two, oldest tick first)
};

// ---------------------------------------------------------------- helpers

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// A metadata value in a chip of the graph: a scalar as it is; a map or list (a value the
// server cut is one) as the beginning of its JSON.
function chipText(value) {
  if (value === null || typeof value !== "object") return String(value);
  const text = value.$truncated ? `${value.preview} …` : JSON.stringify(value);
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(url, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  let response;
  try {
    response = await fetch(url, init);
  } catch (e) {
    showError(`the server did not answer (${e.message}): is snapvc ui still running?`);
    throw e;
  }
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) {
    showError(data.error || `${response.status} from ${url}`);
    throw new Error(data.error);
  }
  $("#error").hidden = true;
  return data;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message;
  box.hidden = false;
}

function when(iso, full = false) {
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  const p = (n) => String(n).padStart(2, "0");
  const day = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  const time = `${p(d.getHours())}:${p(d.getMinutes())}`;
  if (full) return `${day} ${time}:${p(d.getSeconds())}`;
  return d.getFullYear() === new Date().getFullYear() ? `${day.slice(5)} ${time}` : day;
}

function tokens(meta) {
  // Token usage is kept under several names by different agent frameworks.
  const u = meta.usage || meta.token_usage || {};
  const n = meta.tokens ?? meta.total_tokens ?? (typeof u === "number" ? u : u.total_tokens ?? u.tokens ?? u.total);
  return typeof n === "number" ? n : null;
}

function count(n) {
  return n >= 10000 ? `${(n / 1000).toFixed(n >= 100000 ? 0 : 1)}k` : String(n);
}

function keyText(key) {
  return typeof key === "number" ? `[${key}]` : String(key);
}

function pathText(path) {
  let out = "";
  for (const k of path) out += typeof k === "number" ? `[${k}]` : (out ? "." : "") + k;
  return out || "(root)";
}

function refClass(label) {
  if (label.startsWith("HEAD")) return "ref head";
  if (label.startsWith("tag: ")) return "ref tag";
  return "ref branch";
}

function refBadges(refs) {
  return refs.map((r) => `<span class="${refClass(r)}">${esc(r)}</span>`).join("");
}

function commitLink(id, text) {
  return el("span", { class: "commit-link mono", "data-commit": id, text: text || id.slice(0, 12), onclick: () => showCommit(id) });
}

function valueBox(value, cls = "") {
  if (value && typeof value === "object" && value.$truncated) {
    return el("div", { class: `value mono ${cls}` },
      el("span", { class: "note", text: `${value.size.toLocaleString()} characters of JSON, shown in part:\n` }), value.preview + " …");
  }
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return el("div", { class: `value mono ${cls}`, text });
}

function setDetail(...nodes) {
  const d = $("#detail");
  d.replaceChildren(...nodes);
  d.scrollTop = 0;
}

// ---------------------------------------------------------------- the graph

async function loadRepo() {
  app.repo = await api("/api/repo");
  $("#repo-path").textContent = app.repo.path;
  const h = app.repo.head;
  $("#head").textContent = h.branch ? `HEAD → ${h.branch}` : h.commit ? `HEAD detached at ${h.commit.slice(0, 12)}` : "no commits yet";
  const mode = $("#mode");
  mode.textContent = app.repo.writable ? "writes enabled" : "read-only";
  mode.className = app.repo.writable ? "badge writable" : "badge";
  fillRefSelect();
}

async function loadMore() {
  if (app.loading || app.cursor === null) return;
  app.loading = true;
  try {
    const q = new URLSearchParams({ limit: PAGE });
    if (app.cursor) q.set("cursor", app.cursor);
    const page = await api(`/api/graph?${q}`);
    for (const row of page.rows) {
      app.index.set(row.id, app.rows.length);
      app.rows.push(row);
    }
    app.cursor = page.cursor;
  } finally {
    app.loading = false;
  }
  $("#graph-status").textContent = app.rows.length === 0 ? "No commits yet." :
    `${app.rows.length.toLocaleString()} commits${app.cursor === null ? "" : " loaded; scroll for more"}`;
  $("#graph-spacer").style.height = `${(app.rows.length + (app.cursor === null ? 0 : 3)) * ROW}px`;
  app.drawn = "";
  drawGraph();
}

async function reloadGraph() {
  app.rows = [];
  app.index = new Map();
  app.cursor = undefined;
  await loadRepo();
  await loadMore();
}

function drawGraph() {
  const scroller = $("#graph-scroll");
  // The range drawn moves in steps of CHUNK rows, so most scroll events redraw nothing.
  const first = Math.max(0, Math.floor((scroller.scrollTop / ROW - AROUND) / CHUNK) * CHUNK);
  const last = Math.min(app.rows.length, Math.ceil(((scroller.scrollTop + scroller.clientHeight) / ROW + AROUND) / CHUNK) * CHUNK);
  if (last >= app.rows.length - AROUND && app.cursor !== null) loadMore();
  const key = `${first}:${last}:${app.current}:${app.picked.join(",")}`;
  if (key === app.drawn) return;
  app.drawn = key;

  let width = 1;
  for (let i = Math.max(0, first - 1); i < last; i++) width = Math.max(width, app.rows[i].width, app.rows[i].lane + 1);
  // A very wide history keeps the messages in view: lanes past MAX_LANES are cut off.
  const lanesPx = Math.min(width, MAX_LANES) * LANE + 6;
  const x = (lane) => lane * LANE + LANE / 2 + 4;
  // The SVG spans only the rows drawn (a history-tall one is slow to paint).
  const origin = Math.max(0, first - 1);
  const y = (i) => (i - origin) * ROW + ROW / 2;

  // One SVG for the rows drawn: each row's edges run from its centre to the next row's.
  let svg = "";
  for (let i = Math.max(0, first - 1); i < last; i++) {
    const r = app.rows[i];
    for (const [a, b] of r.edges) {
      const color = COLORS[(a === r.lane ? b : a) % COLORS.length];
      const x1 = x(a), y1 = y(i), x2 = x(b), y2 = y(i + 1);
      const d = a === b ? `M${x1},${y1}L${x2},${y2}` : `M${x1},${y1}C${x1},${y1 + ROW * 0.6} ${x2},${y2 - ROW * 0.6} ${x2},${y2}`;
      svg += `<path d="${d}" stroke="${color}" stroke-width="2" fill="none"/>`;
    }
  }
  for (let i = first; i < last; i++) {
    const r = app.rows[i];
    const color = COLORS[r.lane % COLORS.length];
    const merge = r.parents.length > 1;
    svg += `<circle cx="${x(r.lane)}" cy="${y(i)}" r="${merge ? 4 : 5}" fill="${merge ? "#fff" : color}" stroke="${color}" stroke-width="2"/>`;
  }
  let html = "";
  for (let i = first; i < last; i++) {
    const r = app.rows[i];
    const m = r.metadata || {};
    const chips = [];
    if (m.step !== undefined) chips.push(`<span class="chip" title="step">step ${esc(chipText(m.step))}</span>`);
    if (m.status !== undefined) {
      const kind = typeof m.status === "string" ? ` status-${esc(m.status.toLowerCase())}` : "";
      chips.push(`<span class="chip${kind}" title="status">${esc(chipText(m.status))}</span>`);
    }
    const t = tokens(m);
    if (t !== null) chips.push(`<span class="chip" title="tokens: ${t}">${count(t)} tok</span>`);
    const cls = ["row", r.id === app.current ? "current" : "", app.picked.includes(r.id) ? "picked" : ""].join(" ");
    html += `<div class="${cls}" style="top:${i * ROW}px" data-id="${r.id}" data-row="${i}" title="${esc(JSON.stringify(m))}">`
      + `<input type="checkbox" class="pick" data-pick="${r.id}" title="tick two commits to compare them"${app.picked.includes(r.id) ? " checked" : ""}>`
      + `<span class="lanes" style="width:${lanesPx}px"></span>`
      + `<span class="id mono">${r.short}</span>${refBadges(r.refs)}`
      + `<span class="msg">${esc(r.message.split("\n")[0] || "(no message)")}</span>`
      + `<span class="meta">${chips.join("")}</span>`
      + `<span class="time" title="${esc(r.time)}">${esc(when(r.time))}</span></div>`;
  }
  // Drawn over the rows (it lets clicks through), so a highlighted row does not hide it.
  html += `<svg class="graph-svg" width="${lanesPx}" height="${(last - origin + 1) * ROW}" style="left:26px;top:${origin * ROW}px;overflow:hidden">${svg}</svg>`;
  $("#graph-rows").innerHTML = html;
}

function onGraphClick(event) {
  const row = event.target.closest(".row");
  if (!row) return;
  const id = row.dataset.id;
  if (event.target.classList.contains("pick") || event.shiftKey) {
    if (event.shiftKey && !event.target.classList.contains("pick")) event.preventDefault();
    togglePick(id);
    return;
  }
  showCommit(id);
}

function togglePick(id) {
  if (app.picked.includes(id)) app.picked = app.picked.filter((p) => p !== id);
  else app.picked = [...app.picked, id].slice(-2);
  const bar = $("#selection");
  bar.hidden = app.picked.length === 0;
  $("#selection-text").textContent = app.picked.length === 1
    ? `${app.picked[0].slice(0, 12)} ticked: tick another commit to compare them.`
    : app.picked.length === 2 ? "Two commits ticked: their diff is on the right." : "";
  app.drawn = "";
  drawGraph();
  if (app.picked.length === 2) {
    // Older on the left: a row further down the graph is older (children come before parents).
    const [a, b] = [...app.picked].sort((x, y) => app.index.get(y) - app.index.get(x));
    showDiff(a, b);
  }
}

function scrollToCommit(id) {
  const i = app.index.get(id);
  if (i === undefined) return;
  const scroller = $("#graph-scroll");
  if (i * ROW < scroller.scrollTop || (i + 1) * ROW > scroller.scrollTop + scroller.clientHeight) {
    scroller.scrollTop = Math.max(0, i * ROW - scroller.clientHeight / 3);
  }
}

// ---------------------------------------------------------------- a commit

async function showCommit(rev) {
  const c = await api(`/api/commit/${encodeURIComponent(rev)}`);
  app.current = c.id;
  switchView("graph");
  scrollToCommit(c.id);
  app.drawn = "";
  drawGraph();

  const meta = el("dl", { class: "kv" });
  const add = (k, v) => meta.append(el("dt", { text: k }), el("dd", {}, v));
  add("commit", c.id);
  add("time", when(c.time, true));
  const parents = el("span");
  if (c.parents.length === 0) parents.append("none (a root commit)");
  c.parents.forEach((p, i) => { if (i) parents.append(", "); parents.append(commitLink(p)); });
  add(c.parents.length > 1 ? "parents" : "parent", parents);
  for (const [k, v] of Object.entries(c.metadata || {})) add(k, typeof v === "string" ? v : JSON.stringify(v));

  const head = el("div", { id: "commit-detail", "data-id": c.id });
  const title = el("h2", {}, c.message.split("\n")[0] || "(no message)");
  const refs = el("div", { class: "subtitle" });
  refs.innerHTML = `<span class="mono">${c.short}</span> ${refBadges(c.refs)}`;
  const actions = el("div", { class: "actions" },
    el("button", { id: "browse-state", text: "Browse the state here", onclick: () => showState(c.id) }));
  if (c.parents.length) actions.append(el("button", { id: "diff-parent", text: "Compare with its parent",
    onclick: () => showDiff(c.parents[0], c.id) }));
  head.append(title, refs);
  if (c.message.includes("\n")) head.append(el("div", { class: "value", text: c.message }));
  head.append(meta, actions);
  if (app.repo && app.repo.writable) head.append(writeForms(c));
  head.append(el("h3", { text: `Changes${c.parents.length ? " against its first parent" : ""} (${c.changes.length})` }),
    changeTree(c.changes, c.id, "changes"));
  setDetail(head);
}

// ---------------------------------------------------------------- changes as a tree of paths

function changeTree(changes, rev, id) {
  const box = el("div", { class: "tree", id });
  if (changes.length === 0) {
    box.append(el("div", { class: "note", text: "No changes." }));
    return box;
  }
  // A trie of the changed paths: each change sits at the node of its path.
  const root = { children: new Map(), change: null, path: [] };
  for (const ch of changes) {
    let node = root;
    for (const k of ch.path) {
      if (!node.children.has(k)) node.children.set(k, { children: new Map(), change: null, path: [...node.path, k] });
      node = node.children.get(k);
    }
    node.change = ch;
  }
  const open = changes.length <= 60;  // many changes: values stay folded until asked for
  const walk = (node) => {
    const ul = el("ul");
    for (const [k, child] of node.children) ul.append(changeNode(k, child, rev, open, walk));
    return ul;
  };
  if (root.change) box.append(changeBody(root.change));
  box.append(walk(root));
  return box;
}

function countChanges(node) {
  let n = node.change ? 1 : 0;
  for (const c of node.children.values()) n += countChanges(c);
  return n;
}

function changeNode(key, node, rev, open, walk) {
  const li = el("li", { class: "change-node", "data-path": pathText(node.path) });
  const body = el("div");
  const toggle = el("span", { class: "toggle", text: "▾" });
  const head = el("div", { class: "node-head" }, toggle, el("span", { class: "key", text: keyText(key) }));
  if (node.change) {
    const ch = node.change;
    li.dataset.kind = ch.kind;
    head.append(el("span", { class: `kind ${ch.kind}`, text: ch.kind }));
    if (ch.items) {
      const n = (k) => ch.items[k].length;
      head.append(el("span", { class: "size", text: [n("added") && `${n("added")} added`, n("removed") && `${n("removed")} removed`].filter(Boolean).join(", ") }));
    } else {
      const sizes = ch.kind === "added" ? ch.new_size : ch.kind === "removed" ? ch.old_size : `${ch.old_size} → ${ch.new_size}`;
      head.append(el("span", { class: "size", text: `${sizes} ${sizes === 1 ? "char" : "chars"}` }));
    }
    body.append(changeBody(ch));
  } else {
    head.append(el("span", { class: "size", text: `${countChanges(node)} changed below` }));
  }
  if (node.children.size) body.append(walk(node));
  head.append(historyButton(node.path, rev));
  const fold = (shut) => { body.hidden = shut; toggle.textContent = shut ? "▸" : "▾"; };
  toggle.addEventListener("click", () => fold(!body.hidden));
  head.querySelector(".key").addEventListener("click", () => fold(!body.hidden));
  fold(node.change ? !open : false);
  li.append(head, body);
  return li;
}

function historyButton(path, rev) {
  return el("button", { class: "link hist", "data-history": JSON.stringify(path), title: "every commit that changed this path",
    text: "history", onclick: (e) => { e.stopPropagation(); showHistory(path, rev); } });
}

function changeBody(ch) {
  const body = el("div", { class: "change-body" });
  if (ch.text_diff) {
    const box = el("div", { class: "textdiff mono" });
    for (const line of ch.text_diff) {
      const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      box.append(el("div", { class: cls, text: line }));
    }
    body.append(box);
  } else if (ch.items) {
    const box = el("div", { class: "items" });
    for (const it of ch.items.removed) box.append(el("div", { class: "item del" }, el("span", { class: "sign", text: "−" }),
      el("span", { class: "size", text: `[${it.index}]` }), valueBox(it.value, "old")));
    for (const it of ch.items.added) box.append(el("div", { class: "item add" }, el("span", { class: "sign", text: "+" }),
      el("span", { class: "size", text: `[${it.index}]` }), valueBox(it.value, "new")));
    body.append(box);
  } else if (ch.kind === "added") {
    body.append(valueBox(ch.new, "new"));
  } else if (ch.kind === "removed") {
    body.append(valueBox(ch.old, "old"));
  } else {
    body.append(valueBox(ch.old, "old"), el("div", { class: "arrow", text: "↓" }), valueBox(ch.new, "new"));
  }
  return body;
}

// ---------------------------------------------------------------- a diff of two commits

async function showDiff(a, b) {
  const d = await api(`/api/diff?${new URLSearchParams({ a, b })}`);
  const box = el("div", { id: "diff-detail", "data-a": d.a, "data-b": d.b });
  const title = el("h2", {}, "Diff ", commitLink(d.a), " → ", commitLink(d.b));
  const swap = el("button", { id: "diff-swap", text: "Swap sides", onclick: () => showDiff(d.b, d.a) });
  box.append(title, el("div", { class: "subtitle", text: `${d.changes.length} change${d.changes.length === 1 ? "" : "s"}: what ${d.b.slice(0, 12)} has that ${d.a.slice(0, 12)} has not` }),
    el("div", { class: "actions" }, swap), changeTree(d.changes, d.b, "diff-changes"));
  setDetail(box);
}

// ---------------------------------------------------------------- the state at a commit

async function showState(rev) {
  const root = await api(`/api/state/${encodeURIComponent(rev)}?path=${encodeURIComponent("[]")}`);
  const box = el("div", { id: "state-detail", "data-rev": rev });
  box.append(el("h2", {}, "State at ", commitLink(rev)),
    el("div", { class: "subtitle", text: "Only the parts you open are read from the repository." }));
  const tree = el("div", { class: "tree", id: "state-tree" });
  tree.append(stateChildren(rev, root));
  box.append(tree);
  setDetail(box);
}

function stateChildren(rev, node) {
  const ul = el("ul");
  if (node.kind === "value") {
    ul.append(el("li", {}, valueBox(node.value)));
    return ul;
  }
  const addPage = (page) => {
    for (const child of page.children) ul.append(stateNode(rev, [...page.path, child.key], child));
    const next = page.offset + page.children.length;
    if (next < page.size) {
      const more = el("button", { class: "more state-more", text: `show more (${(page.size - next).toLocaleString()} left)` });
      more.addEventListener("click", async () => {
        const q = new URLSearchParams({ path: JSON.stringify(page.path), offset: next, limit: page.limit });
        const nextPage = await api(`/api/state/${encodeURIComponent(rev)}?${q}`);
        more.parentElement.remove();
        addPage(nextPage);
      });
      ul.append(el("li", {}, more));
    }
  };
  if (node.children.length === 0) ul.append(el("li", { class: "note", text: node.kind === "list" ? "empty list" : "empty map" }));
  addPage(node);
  return ul;
}

function stateNode(rev, path, child) {
  const li = el("li", { class: "state-node", "data-key": String(child.key), "data-kind": child.kind, "data-path": pathText(path) });
  const toggle = el("span", { class: "toggle", text: "▸" });
  const unit = { map: ["key", "keys"], list: ["item", "items"], value: ["char", "chars"] }[child.kind] || ["", ""];
  const sizeText = `${child.size} ${unit[child.size === 1 ? 0 : 1]}`;
  const head = el("div", { class: "node-head" }, toggle, el("span", { class: "key", text: keyText(child.key) }),
    el("span", { class: "size", text: sizeText }));
  head.append(el("span", { class: "preview", text: child.preview }));
  head.append(historyButton(path, rev));
  li.append(head);
  let body = null;
  const open = async () => {
    if (body) {
      body.hidden = !body.hidden;
      toggle.textContent = body.hidden ? "▸" : "▾";
      return;
    }
    const q = new URLSearchParams({ path: JSON.stringify(path) });
    const node = await api(`/api/state/${encodeURIComponent(rev)}?${q}`);
    body = el("div", { class: "state-children" }, stateChildren(rev, node));
    li.append(body);
    toggle.textContent = "▾";
  };
  toggle.addEventListener("click", open);
  head.querySelector(".key").addEventListener("click", open);
  return li;
}

// ---------------------------------------------------------------- the history of a path

async function showHistory(path, rev) {
  const q = new URLSearchParams({ path: JSON.stringify(path), rev: rev || "HEAD", limit: 100 });
  const h = await api(`/api/history?${q}`);
  const box = el("div", { id: "history-detail", "data-path": pathText(path) });
  box.append(el("h2", {}, "History of ", el("code", { text: pathText(path) })),
    el("div", { class: "subtitle", text: `${h.entries.length}${h.entries.length === 100 ? "+" : ""} commits changed it, newest first, reachable from ${String(rev || "HEAD").slice(0, 12)}` }));
  const list = el("ul", { class: "timeline" });
  for (const e of h.entries) {
    const value = e.kind === "removed" ? el("div", { class: "note", text: "(removed)" }) : valueBox(e.value);
    const item = el("li", { class: "history-entry", "data-commit": e.commit },
      el("div", {}, el("span", { class: `kind ${e.kind}`, text: e.kind }), " ", commitLink(e.commit, e.short), " ",
        el("span", { text: e.message.split("\n")[0] }), " ", el("span", { class: "when", text: when(e.time, true) })),
      value);
    list.append(item);
  }
  if (h.entries.length === 0) box.append(el("div", { class: "note", text: "No commit changed this path." }));
  box.append(list);
  setDetail(box);
}

// ---------------------------------------------------------------- threads

// Each load counts itself: an answer that comes after a newer load was asked for (a
// filter submitted while the last list was still on its way) is dropped, not shown.
let threadsLoads = 0;

async function loadThreads() {
  const load = ++threadsLoads;
  const where = $("#threads-where").value.split(",").map((s) => s.trim()).filter(Boolean);
  const bad = where.find((w) => !w.includes("="));
  if (bad) {
    showError(`the filter ${JSON.stringify(bad)} is not key=value`);
    return;
  }
  const q = new URLSearchParams();
  for (const w of where) q.append("where", w);
  const data = await api(`/api/threads?${q}`);
  if (load !== threadsLoads) return;
  const list = $("#threads-list");
  if (data.threads.length === 0) {
    list.replaceChildren(el("div", { class: "empty", text: where.length ? "No thread matches the filter." : "No LangGraph threads in this repository." }));
    return;
  }
  const table = el("table", { class: "list", id: "threads-table" });
  table.innerHTML = "<thead><tr><th>thread</th><th>session</th><th>commits</th><th>latest checkpoint</th><th>forks</th></tr></thead>";
  const tbody = el("tbody");
  for (const t of data.threads) {
    const latest = el("td", {}, commitLink(t.latest.id, t.latest.short), " ", el("span", { text: t.latest.message.split("\n")[0] }),
      el("div", { class: "note", text: `${when(t.latest.time, true)} ${Object.entries(t.latest.metadata || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ")}` }));
    const forks = el("td");
    for (const f of t.forks) forks.append(el("span", { class: "ref branch", text: f }), " ");
    tbody.append(el("tr", { class: "thread-row", "data-thread": t.thread_id },
      el("td", {}, el("div", { class: "mono", text: t.thread_id }), el("div", { class: "note", text: `${t.namespace ? `ns ${t.namespace}, ` : ""}branch ${t.branch}` })),
      el("td", { class: "mono", text: t.session || "" }), el("td", { text: String(t.commits) }), latest, forks));
  }
  table.append(tbody);
  list.replaceChildren(table);
}

// ---------------------------------------------------------------- the reflog

function fillRefSelect() {
  const select = $("#reflog-ref");
  const keep = select.value;
  select.replaceChildren(el("option", { value: "HEAD", text: "HEAD" }));
  for (const b of app.repo.branches) select.append(el("option", { value: `refs/heads/${b.name}`, text: b.name }));
  for (const t of app.repo.tags) select.append(el("option", { value: `refs/tags/${t.name}`, text: `tag: ${t.name}` }));
  if ([...select.options].some((o) => o.value === keep)) select.value = keep;
  $("#reflog-undo").hidden = !app.repo.writable;
}

async function loadReflog(ref) {
  const select = $("#reflog-ref");
  if (ref) select.value = ref;
  const data = await api(`/api/reflog?${new URLSearchParams({ ref: select.value, limit: 50 })}`);
  const list = $("#reflog-list");
  if (data.entries.length === 0) {
    list.replaceChildren(el("div", { class: "empty", text: `${data.ref} has not moved yet.` }));
    return;
  }
  const table = el("table", { class: "list", id: "reflog-table", "data-ref": data.ref });
  table.innerHTML = "<thead><tr><th>when</th><th>from</th><th>to</th><th>why</th></tr></thead>";
  const tbody = el("tbody");
  for (const e of data.entries) {
    tbody.append(el("tr", { class: "reflog-entry" },
      el("td", { class: "note when", text: when(e.time, true) }),
      el("td", { class: "from" }, e.old ? commitLink(e.old) : el("span", { class: "note", text: "(new)" })),
      el("td", { class: "to" }, e.new ? commitLink(e.new) : el("span", { class: "note", text: "(deleted)" })),
      el("td", { class: "reason", text: e.reason })));
  }
  table.append(tbody);
  list.replaceChildren(table);
}

async function undo() {
  const ref = $("#reflog-ref").value;
  const done = await api("/api/undo", { ref });
  await reloadGraph();
  await loadReflog(done.ref);
}

// ---------------------------------------------------------------- writes

function writeForms(c) {
  const box = el("div", { id: "write-forms" });
  box.append(el("h3", { text: "Refs" }));
  const result = el("div", { id: "write-result", class: "ok-note" });
  const form = (id, label, placeholder, send) => {
    const input = el("input", { id: `${id}-name`, class: "mono", placeholder });
    const go = el("button", { id: `${id}-go`, text: label });
    const run = async () => {
      const name = input.value.trim();
      if (!name) { input.focus(); return; }
      const done = await api(...send(name));
      input.value = "";
      await afterWrite(done, result);
    };
    go.addEventListener("click", run);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") run(); });
    return el("div", { class: "write-form" }, input, go);
  };
  box.append(form("fork", "Branch from here", "new branch name", (name) => ["/api/branch", { name, rev: c.id }]));
  box.append(form("tag", "Tag this commit", "tag name", (name) => ["/api/tag", { name, rev: c.id }]));
  const branches = el("select", { id: "reset-branch", class: "mono" });
  for (const b of app.repo.branches) branches.append(el("option", { value: b.name, text: b.name }));
  const reset = el("button", { id: "reset-go", text: "Reset branch here" });
  reset.addEventListener("click", async () => {
    const done = await api("/api/reset", { branch: branches.value, rev: c.id });
    await afterWrite(done, result);
  });
  box.append(el("div", { class: "write-form" }, branches, reset),
    el("div", { class: "note", text: "Every move is kept in the reflog; Undo there moves a ref back." }), result);
  return box;
}

async function afterWrite(done, result) {
  result.replaceChildren(`${done.ref} is at ${done.commit.slice(0, 12)}. `,
    el("button", { class: "link", id: "see-reflog", text: "see its reflog", onclick: () => { switchView("reflog"); loadReflog(done.ref); } }));
  await reloadGraph();
  const select = $("#reset-branch");
  if (select) {
    const keep = select.value;
    select.replaceChildren(...app.repo.branches.map((b) => el("option", { value: b.name, text: b.name })));
    select.value = keep;
  }
}

// ---------------------------------------------------------------- views

function switchView(name) {
  for (const v of ["graph", "threads", "reflog"]) {
    $(`#view-${v}`).hidden = v !== name;
    $(`#tab-${v}`).classList.toggle("active", v === name);
  }
  if (name === "graph") { app.drawn = ""; drawGraph(); }
}

function start() {
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => {
      switchView(tab.dataset.view);
      if (tab.dataset.view === "threads") loadThreads();
      if (tab.dataset.view === "reflog") loadReflog();
    });
  }
  $("#graph-scroll").addEventListener("scroll", drawGraph, { passive: true });
  $("#graph-rows").addEventListener("click", onGraphClick);
  window.addEventListener("resize", () => { app.drawn = ""; drawGraph(); });
  $("#selection-clear").addEventListener("click", () => {
    app.picked = [];
    $("#selection").hidden = true;
    app.drawn = "";
    drawGraph();
  });
  $("#threads-filter").addEventListener("submit", (e) => { e.preventDefault(); loadThreads(); });
  $("#reflog-ref").addEventListener("change", () => loadReflog());
  $("#reflog-undo").addEventListener("click", undo);
  reloadGraph().catch(() => {});
}

start();
